"""The plan file, the copy job's only input: one format, versioned, written and read by one
module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ferry.core import plan_file
from ferry.core.plan_file import PlanFile, PlanFileError
from ferry.core.planner import Gap, Range

PLAN = PlanFile(
    flow="A->B", run_id="manual__2026-11-26", lanes=3,
    ranges=(Range("orders", 0, 100, 250, expect=100, source_id="s1", target_id="t1"),
            Range("orders", 1, 0, 0),
            Range("audit", 0, 40, 90, skip_from=10)),
    gaps=(Gap("audit", 0, 10, 40),), role="backfill", planned_at="2026-11-26T14:00:00+00:00",
    label="chunk 1/2: 2 topics, 3 partitions, 200 offsets", topics=("audit", "idle", "orders"))


def test_a_plan_written_then_read_is_the_same_plan(tmp_path: Path) -> None:
    path = plan_file.write(tmp_path / "plans" / "run.json", PLAN, {"partitions": []})

    assert plan_file.read(path) == PLAN
    assert json.loads(Path(path).read_text())["version"] == plan_file.VERSION


def test_a_plan_without_the_flows_topics_an_earlier_release_wrote_reads_as_none_known(
) -> None:
    data = PLAN.to_json()
    del data["topics"]

    assert PlanFile.from_json(data).topics == ()


def test_keys_for_people_beside_the_plan_are_ignored_by_the_reader() -> None:
    data = PLAN.to_json() | {"topology": {"create": []}, "partitions": [{"topic": "x"}]}
    data["ranges"][0]["note"] = "added by hand"

    assert PlanFile.from_json(data) == PLAN


@pytest.mark.parametrize(
    ("change", "says"),
    [({"version": 2}, "plan file version 2 is not the one this Ferry reads (1)"),
     ({"version": None}, "plan file version None is not the one this Ferry reads (1)"),
     ({"lanes": "many"}, "not a Ferry plan file"),
     ({"ranges": [{"topic": "orders"}]}, "not a Ferry plan file")],
    ids=["newer-version", "no-version", "bad-lanes", "range-without-offsets"])
def test_a_plan_of_another_version_or_shape_is_refused_naming_the_file(
    change: dict[str, Any], says: str
) -> None:
    data = PLAN.to_json() | change

    with pytest.raises(PlanFileError, match=r"^plan /tmp/run\.json: ") as err:
        PlanFile.from_json(data, "plan /tmp/run.json")
    assert says in str(err.value)


def test_a_missing_or_unreadable_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{not json")

    with pytest.raises(PlanFileError, match=r"broken\.json: cannot be read"):
        plan_file.read(tmp_path / "broken.json")
    with pytest.raises(PlanFileError, match=r"absent\.json: cannot be read"):
        plan_file.read(tmp_path / "absent.json")

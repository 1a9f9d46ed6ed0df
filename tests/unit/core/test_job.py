"""The copy job's result file: what a spark-submit job leaves beside its plan for the cycle
that submitted it, read once, and never half."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferry.core.job import read_result, result_path, run_summary, write_result
from ferry.core.tables import RangeOutcome


def test_the_result_lies_beside_its_plan() -> None:
    assert result_path("/state/plans/A-B/r1.json") == "/state/plans/A-B/r1.result.json"


def test_a_result_written_is_read_back_once(tmp_path: Path) -> None:
    plan = str(tmp_path / "r1.json")
    summary = run_summary("r1", [], 0)

    write_result(plan, summary)

    assert read_result(plan) == summary
    assert read_result(plan) is None  # consumed: a later cycle never takes it for its own
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", [
    None,  # the job died before writing it
    "{\"version\": 1, \"summ",  # cut short (not written by write_result, which renames)
    json.dumps({"version": 2, "summary": {"run_id": "r1"}}),  # another Ferry's format
    json.dumps({"version": 1, "summary": ["r1"]}),
    json.dumps(["r1"]),
])
def test_a_missing_or_foreign_result_is_none_so_the_run_is_read_from_delta(
    tmp_path: Path, text: str | None
) -> None:
    plan = str(tmp_path / "r1.json")
    if text is not None:
        Path(result_path(plan)).write_text(text)

    assert read_result(plan) is None
    assert not Path(result_path(plan)).exists()


def test_the_summary_counts_the_final_rows_and_names_the_failed_partitions() -> None:
    def row(partition: int, outcome: RangeOutcome, records: int) -> dict[str, object]:
        return {"topic": "orders", "partition": partition, "range_start": 0,
                "range_end": records, "records": records, "bytes": 3 * records,
                "outcome": outcome}

    summary = run_summary("r1", [row(0, RangeOutcome.COPIED, 5),
                                 row(1, RangeOutcome.FAILED, 0),
                                 row(2, RangeOutcome.SKIPPED, 0)], gaps=2)

    assert summary == {"run_id": "r1", "ranges": 3, "records": 5, "bytes": 15,
                       "failed": ["orders-1"], "handed_over": [], "gaps": 2,
                       "topics": {"orders": {"records": 5, "partitions": {"0": [0, 5]}}}}


def test_the_summary_names_partitions_handed_over_apart_from_failed_ones() -> None:
    def row(partition: int, outcome: RangeOutcome) -> dict[str, object]:
        return {"topic": "orders", "partition": partition, "range_start": 0,
                "range_end": 5, "records": 0, "bytes": 0, "outcome": outcome}

    summary = run_summary("r1", [row(0, RangeOutcome.HANDED_OVER),
                                 row(1, RangeOutcome.FAILED)], gaps=0)

    assert summary["failed"] == ["orders-1"]
    assert summary["handed_over"] == ["orders-0"]

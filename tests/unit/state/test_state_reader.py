"""Reads of the Delta state without a JVM (delta-rs): what a cycle asks about, not the
table's whole history."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ferry.core.tables import OFFSET_MAP_DDL, RUNS_DDL
from ferry.state.reader import max_map_offsets, recorded_run_ids, rows
from ferry.state.writer import append


def runs_row(flow: str, run_id: str) -> dict[str, object]:
    names = [column.split(" ")[0] for column in RUNS_DDL.split(", ")]
    return {**dict.fromkeys(names), "flow": flow, "run_id": run_id,
            "finished_at": datetime.now(UTC)}


def test_recorded_run_ids_are_those_of_the_flow_among_the_ones_asked_about(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs")
    append(path, RUNS_DDL, [runs_row("A->B", "r1"), runs_row("A->B", "r2")])
    append(path, RUNS_DDL, [runs_row("C->B", "r3"), runs_row("A->B", "r4")])

    assert recorded_run_ids(path, "A->B", {"r1", "r3", "r4", "r9"}) == {"r1", "r4"}
    assert recorded_run_ids(path, "A->B", set()) == set()
    assert recorded_run_ids(str(tmp_path / "none"), "A->B", {"r1"}) == set()


def map_row(flow: str, map_offset: int, map_topic_id: str | None) -> dict[str, object]:
    names = [column.split(" ")[0] for column in OFFSET_MAP_DDL.split(", ")]
    return {**dict.fromkeys(names), "flow": flow, "map_offset": map_offset,
            "map_topic_id": map_topic_id, "segments": []}


@pytest.mark.parametrize(("entries", "expected"), [
    ([], {}),
    ([("A->B", 4, "id1"), ("A->B", 9, "id1")], {"id1": 9}),
    ([("A->B", 7, "id1"), ("A->B", 2, "id2")], {"id1": 7, "id2": 2}),  # a recreated topic
    ([("A->B", 5, None), ("A->B", 6, ""), ("A->B", 1, "id1")], {"": 6, "id1": 1}),  # older rows
    ([("C->B", 40, "id1"), ("A->B", 3, "id1")], {"id1": 3}),  # another flow's rows
])
def test_the_highest_recorded_map_offset_of_each_map_topic_incarnation_of_the_flow(
    tmp_path: Path, entries: list[tuple[str, int, str | None]], expected: dict[str, int]
) -> None:
    path = str(tmp_path / "offset_map")
    for flow, offset, topic_id in entries:
        append(path, OFFSET_MAP_DDL, [map_row(flow, offset, topic_id)])

    assert max_map_offsets(path, "A->B") == expected


def test_rows_are_the_flows_own_with_the_columns_asked_equal(tmp_path: Path) -> None:
    path = str(tmp_path / "runs")
    append(path, RUNS_DDL, [runs_row("A->B", "r1"), runs_row("A->B", "r2"),
                            runs_row("C->B", "r1")])

    assert sorted(r["run_id"] for r in rows(path, "A->B")) == ["r1", "r2"]
    assert [(r["flow"], r["run_id"]) for r in rows(path, "A->B", run_id="r1")] == [
        ("A->B", "r1")]
    assert rows(path, "X->Y") == [] and rows(str(tmp_path / "none"), "A->B") == []

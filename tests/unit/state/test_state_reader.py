"""Reads of the Delta state without a JVM (delta-rs): what a cycle asks about, not the
table's whole history."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ferry.core.tables import RUNS_DDL
from ferry.state.reader import recorded_run_ids
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

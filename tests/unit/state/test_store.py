"""The state-store port (`ferry.steps.ports.StateStore`): the Delta store and the steps'
in-memory one answer alike, so a step tested on the second behaves so on the first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ferry.core.offsetmap import MapEntry, Segment
from ferry.core.planner import Gap
from ferry.core.tables import JOB_TABLES, StatePaths, gap_row, offset_map_row, sync_row
from ferry.state.store import DeltaStore
from ferry.steps.ports import StateStore
from tests.unit.steps.fakes import MemoryStore

STORES: dict[str, Callable[[Path], StateStore]] = {
    "delta": lambda root: DeltaStore(str(root)),
    "memory": lambda _: MemoryStore(),
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    return STORES[request.param](tmp_path / "state")


def test_a_table_never_written_reads_as_empty(store: StateStore) -> None:
    assert store.rows("runs", "A->B") == []
    assert store.last_steps("A->B") == {}
    assert store.map_rows("A->B") == []


def test_rows_are_the_flows_own_filtered_by_column(store: StateStore) -> None:
    gaps = [Gap("orders", 0, 10, 20), Gap("orders", 1, 0, 5)]
    store.append("gaps", [gap_row("A->B", "r1", gaps[0], "fail"),
                          gap_row("A->B", "r2", gaps[1], "fail"),
                          gap_row("C->B", "r1", gaps[1], "fail")])

    assert [(r["partition"], r["run_id"]) for r in store.rows("gaps", "A->B", run_id="r1")] \
        == [(0, "r1")]
    assert len(store.rows("gaps", "A->B")) == 2


def test_a_gap_is_recorded_once_whichever_run_finds_it_again(store: StateStore) -> None:
    seen, new = Gap("orders", 0, 10, 20), Gap("orders", 0, 30, 40)
    store.append("gaps", [gap_row("A->B", "r1", seen, "fail")])

    assert store.unrecorded_gaps("A->B", [seen, new]) == [new]
    assert store.unrecorded_gaps("C->B", [seen]) == [seen]  # another flow's gap


def test_the_last_run_of_each_step_is_the_latest_recorded(store: StateStore) -> None:
    now = datetime(2026, 11, 29, tzinfo=UTC)
    store.append("syncs", [sync_row("A->B", "r1", "configs", [], now - timedelta(hours=1)),
                           sync_row("A->B", "r2", "configs", [], now),
                           sync_row("A->B", "r2", "acls", ["x"], now - timedelta(hours=2))])

    assert store.last_steps("A->B") == {"configs": now, "acls": now - timedelta(hours=2)}


def test_offset_map_rows_come_back_with_their_topic_offsets(store: StateStore) -> None:
    def entry(topic: str, start: int) -> MapEntry:
        return MapEntry(flow="A->B", run_id="r1", lane=0, source_topic=topic,
                        source_partition=0, target_topic=f"A.{topic}", target_partition=0,
                        covered_start=start, covered_end=start + 5,
                        segments=(Segment(start, start, 5),), committed_at_ms=1_700_000_000_000)

    job_writes(store, "offset_map", [offset_map_row(entry("orders", 0), "map", 7, "m1"),
                                     offset_map_row(entry("users", 0), "map", 8, "m1")])

    rows = store.map_rows("A->B", ["orders"])
    assert [(r.offset, r.entry.source_topic, r.map_topic_id) for r in rows] == \
        [(7, "orders", "m1")]
    assert store.map_rows("A->B", []) == []


def test_a_table_of_no_known_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no state table 'run'"):
        DeltaStore(str(tmp_path)).rows("run", "A->B")


@pytest.mark.parametrize("table", sorted(JOB_TABLES))
def test_the_copy_jobs_tables_are_never_appended_to_by_a_step(tmp_path: Path,
                                                                table: str) -> None:
    with pytest.raises(ValueError, match=f"the {table} table is the copy job's"):
        DeltaStore(str(tmp_path)).append(table, [])


def job_writes(store: StateStore, table: str, rows: list[dict[str, Any]]) -> None:
    """`rows` in `table` as the copy job leaves them (Spark, in the product)."""
    if isinstance(store, MemoryStore):
        store.tables.setdefault(table, []).extend(rows)
        return
    import pyarrow as pa
    from deltalake import write_deltalake

    assert isinstance(store, DeltaStore)
    write_deltalake(StatePaths(store.root).table(table), pa.Table.from_pylist(rows))

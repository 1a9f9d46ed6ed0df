"""Each state table's rows are built next to its schema: a row has exactly the table's
columns, so a column added to a schema without its row (or the other way round) fails
here, not in a Delta append on a user's machine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from ferry.core import tables
from ferry.core.offsetmap import ADOPTED_LANE, RESET_LANE, MapEntry, Segment
from ferry.core.planner import Gap

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
ENTRY = MapEntry("A->B", "run-1", 0, "orders", 0, "A.orders", 0, 0, 10,
                 (Segment(0, 0, 10),), 1_800_000_000_000, 1234, 10, "sid", "tid")


def columns(ddl: str) -> list[str]:
    """Top-level column names of a DDL string (struct fields inside <...> skipped)."""
    names, depth, token = [], 0, ""
    for char in ddl + ",":
        depth += char == "<"
        depth -= char == ">"
        if char == "," and depth == 0:
            names.append(token.strip().split(" ")[0])
            token = ""
        else:
            token += char
    return names


ROWS: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
    ("offset_map", tables.OFFSET_MAP_DDL,
     lambda: tables.offset_map_row(ENTRY, "ferry-offset-map.A.internal", 7, "mid")),
    ("runs", tables.RUNS_DDL,
     lambda: tables.run_row("A->B", "run-1", 0, tables.RangeResult("orders", 0, 0, 10, 10),
                            "exactly_once", NOW)),
    ("runs (rebuilt)", tables.RUNS_DDL,
     lambda: tables.runs_from_entries([ENTRY], set(), "exactly_once")[0]),
    ("gaps", tables.GAPS_DDL,
     lambda: tables.gap_row("A->B", "run-1", Gap("orders", 0, 0, 5), "continue")),
    ("lag", tables.LAG_DDL,
     lambda: tables.lag_row("A->B", "run-1", "orders", 0, 10, 8, 2, 1.5, NOW)),
    ("syncs", tables.SYNCS_DDL,
     lambda: tables.sync_row("A->B", "run-1", "topics", ["create A.orders"], NOW)),
    ("checkpoints", tables.CHECKPOINTS_DDL,
     lambda: tables.checkpoint_row("A->B", "run-1", "billing", "orders", 0, 5, "A.orders", 5,
                                   "exact", True, False, NOW)),
    ("verify", tables.VERIFY_DDL,
     lambda: tables.verify_row("A->B", "run-1", "orders", 0, 0, 10, 10, 0, 0, 0, 0, [], True,
                               NOW)),
    ("incidents", tables.INCIDENTS_DDL,
     lambda: tables.incident_row("A->B", "run-1", "position-restored", "orders", 0,
                                 "restored 5", NOW)),
]


@pytest.mark.parametrize(("table", "ddl", "build"), ROWS, ids=[r[0] for r in ROWS])
def test_a_row_has_exactly_its_tables_columns_in_order(
    table: str, ddl: str, build: Callable[[], dict[str, Any]]
) -> None:
    row = build()

    assert list(row) == columns(ddl)
    assert row["schema_version"] == tables.SCHEMA_VERSION


def test_a_sync_row_counts_and_lists_its_changes() -> None:
    row = tables.sync_row("A->B", "r", "configs", ["a", "b"], NOW)

    assert (row["changes"], row["detail"]) == (2, '["a", "b"]')


def test_a_verify_row_keeps_the_first_hundred_mismatches_and_names_its_outcome() -> None:
    many = [{"source_offset": i} for i in range(150)]

    row = tables.verify_row("A->B", "r", "t", 0, 0, 150, 150, 150, 0, 0, 0, many, False, NOW)

    assert row["outcome"] == "mismatch" and row["mismatches"].count("source_offset") == 100


def _range(topic: str, partition: int, start: int, end: int, records: int,
           outcome: str = "copied") -> dict[str, object]:
    return {"topic": topic, "partition": partition, "range_start": start, "range_end": end,
            "records": records, "outcome": outcome}


@pytest.mark.parametrize(("ranges", "topics"), [
    ([], {}),
    ([_range("orders", 0, 0, 50, 50), _range("orders", 0, 50, 80, 30),
      _range("orders", 1, 10, 20, 10)],
     {"orders": {"records": 90, "partitions": {"0": [0, 80], "1": [10, 20]}}}),
    ([_range("orders", 0, 0, 50, 50, "failed"), _range("audit", 0, 5, 9, 4)],
     {"audit": {"records": 4, "partitions": {"0": [5, 9]}}}),
    ([_range("payments", 0, 0, 12, 0)], {}),  # markers and aborted records only
], ids=["nothing", "ranges-of-a-topic-widen-per-partition", "failed-ranges-do-not-count",
        "no-records-no-topic"])
def test_copied_topics_are_the_topics_that_received_records_and_their_source_ranges(
        ranges: list[dict[str, object]], topics: dict[str, object]) -> None:
    from ferry.core.tables import copied_topics

    assert copied_topics(ranges) == topics


def test_cycles_of_one_task_merge_their_copied_topics() -> None:
    from ferry.core.tables import merge_copied

    seen: dict[str, dict[str, object]] = {}
    merge_copied(seen, {"orders": {"records": 5, "partitions": {"0": [0, 5]}}})
    merge_copied(seen, {"orders": {"records": 3, "partitions": {"0": [5, 8], "1": [0, 1]}},
                        "audit": {"records": 1, "partitions": {"2": [7, 8]}}})
    assert seen == {"orders": {"records": 8, "partitions": {"0": [0, 8], "1": [0, 1]}},
                    "audit": {"records": 1, "partitions": {"2": [7, 8]}}}


@pytest.mark.parametrize(("run_id", "lane"), [("adopted-mm2-20261127T000000Z", ADOPTED_LANE),
                                              ("reset-20261128T000000Z", RESET_LANE)],
                         ids=["adopted-history", "a-positions-reset"])
def test_entries_that_are_no_copy_of_ferrys_are_not_rebuilt_as_runs(run_id: str,
                                                                     lane: int) -> None:
    other = replace(ENTRY, run_id=run_id, lane=lane)
    rows = tables.runs_from_entries([other, ENTRY], set(), "exactly_once")
    assert [r["run_id"] for r in rows] == [ENTRY.run_id]


@pytest.mark.parametrize("ids", [("s1", "t1", "m1"), ("", "", "")], ids=["with-ids", "no-ids"])
def test_an_offset_map_row_reads_back_as_the_entry_it_was_written_from(
    ids: tuple[str, str, str]
) -> None:
    source_id, target_id, map_id = ids
    written = MapEntry("A->B", "r1", 3, "orders", 2, "A.orders", 2, 10, 15,
                       (Segment(10, 100, 2), Segment(13, 102, 2)), 1_700_000_000_123,
                       target_end=104, source_id=source_id, target_id=target_id)

    row = tables.offset_map_row(written, "ferry-offset-map.A.internal", 42, map_id)

    assert tables.map_row(row) == tables.MapRow(42, written, map_id)


@pytest.mark.parametrize("outcome", list(tables.RangeOutcome))
def test_a_runs_row_holds_the_outcomes_plain_text_and_rows_read_back_compare_equal(
    outcome: tables.RangeOutcome,
) -> None:
    result = tables.RangeResult("orders", 0, 0, 10, outcome=outcome)
    row = tables.run_row("a->b", "r1", 0, result, "exactly_once", datetime(2026, 1, 1, tzinfo=UTC))
    assert type(row["outcome"]) is str and row["outcome"] == outcome.value
    assert row["outcome"] == outcome  # as a row read back from Delta compares


def test_a_rebuilt_run_row_counts_the_duplicates_its_entries_carry() -> None:
    first = replace(ENTRY, duplicates=7)
    later = replace(ENTRY, covered_start=ENTRY.covered_end, covered_end=ENTRY.covered_end + 1,
                    segments=(), duplicates=0)

    (row,) = tables.runs_from_entries([first, later], set(), "at_least_once")

    assert row["duplicates"] == 7


OUT = tables.RangeOutcome


@pytest.mark.parametrize(("outcomes", "run"), [
    ([OUT.COPIED, OUT.SKIPPED], OUT.COPIED),
    ([], OUT.COPIED),
    ([OUT.COPIED, OUT.HANDED_OVER], OUT.HANDED_OVER),  # copied, then left the rest
    ([OUT.HANDED_OVER], OUT.HANDED_OVER),
    ([OUT.COPIED, OUT.HANDED_OVER, OUT.FAILED], OUT.FAILED),  # a real error stays a failure
    (["copied", "handed-over"], OUT.HANDED_OVER),  # as rows read back from Delta hold them
], ids=["copied", "empty", "copied-then-handed-over", "only-handed-over", "failed-wins",
        "as-read-back"])
def test_a_runs_outcome_is_failed_only_for_a_failed_range_and_handed_over_is_no_failure(
    outcomes: list[str], run: tables.RangeOutcome
) -> None:
    assert tables.run_outcome(outcomes) == run
    assert tables.run_outcome(outcomes).failed is (run == OUT.FAILED)


@pytest.mark.parametrize(("outcome", "done"), [
    (OUT.COPIED, True), (OUT.SKIPPED, True), (OUT.FAILED, False), (OUT.HANDED_OVER, False),
    ("handed-over", False), ("copied", True),
], ids=["copied", "skipped", "failed", "handed-over", "handed-over-read-back", "copied-read-back"])
def test_only_copied_and_skipped_ranges_count_as_copied_by_their_run(
    outcome: str, done: bool
) -> None:
    assert tables.copied_by_run(outcome) is done


def entries_of(run_id: str, *covered: tuple[int, int]) -> list[MapEntry]:
    return [replace(ENTRY, run_id=run_id, covered_start=start, covered_end=end,
                    segments=(Segment(start, start, end - start),))
            for start, end in covered]


@pytest.mark.parametrize(("recorded", "rebuilt"), [
    ({}, [(0, 30, 30)]),  # no row of the run: the whole of it
    ({("run-1", "orders", 0): [(0, 30)]}, []),  # its own row
    ({("run-1", "orders", 0): [(0, 10)]}, [(10, 30, 20)]),  # rebuilt while it copied
    ({("run-1", "orders", 1): [(0, 30)]}, [(0, 30, 30)]),  # another partition's row
    ({("run-2", "orders", 0): [(0, 30)]}, [(0, 30, 30)]),  # another run's row
], ids=["none", "all", "the-start", "other-partition", "other-run"])
def test_only_the_entries_no_row_of_their_run_covers_are_rebuilt(
    recorded: dict[tuple[str, str, int], list[tuple[int, int]]],
    rebuilt: list[tuple[int, int, int]]
) -> None:
    found = entries_of("run-1", (0, 10), (10, 20), (20, 30))
    rows = tables.runs_from_entries(found, (), "exactly_once", recorded)
    assert [(r["range_start"], r["range_end"], r["records"]) for r in rows] == rebuilt


def test_a_range_rebuilt_in_full_and_its_own_row_are_one_key_and_another_attempt_is_not(
) -> None:
    columns = tables.ROW_KEYS["runs"]
    (rebuilt,) = tables.runs_from_entries(entries_of("run-1", (0, 10)), (), "exactly_once")
    own = rebuilt | {"seconds": 9.5, "error": ""}
    retried = own | {"outcome": "skipped", "records": 0}
    present = {tables.row_key(columns, rebuilt)}
    assert tables.absent([own, retried, retried], columns, present) == [retried]


@pytest.mark.parametrize("table", ["offset_map", "runs"])
def test_the_tables_recorded_from_the_offset_map_topic_are_keyed_by_their_schema(
    table: str
) -> None:
    assert tables.keyed_table(tables.SCHEMAS[table]) == (table, tables.ROW_KEYS[table])
    assert set(tables.ROW_KEYS[table]) <= set(columns(tables.SCHEMAS[table]))
    assert tables.keyed_table(tables.GAPS_DDL) is None

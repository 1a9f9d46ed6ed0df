"""Each state table's rows are built next to its schema: a row has exactly the table's
columns, so a column added to a schema without its row (or the other way round) fails
here, not in a Delta append on a user's machine."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from ferry.core import tables
from ferry.core.offsetmap import MapEntry, Segment
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

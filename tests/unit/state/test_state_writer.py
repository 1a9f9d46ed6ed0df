"""Appends to the Delta state without a JVM (delta-rs) across Ferry versions: a release
that adds a column appends to a table an older release wrote; the older rows read the new
column as null (docs/upgrade.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from ferry.core.tables import (
    CHECKPOINTS_DDL,
    GAPS_DDL,
    INCIDENTS_DDL,
    LAG_DDL,
    SYNCS_DDL,
    VERIFY_DDL,
)
from ferry.state.writer import append

DELTA_RS_TABLES = {"lag": LAG_DDL, "syncs": SYNCS_DDL, "verify": VERIFY_DDL,
                   "checkpoints": CHECKPOINTS_DDL, "gaps": GAPS_DDL, "incidents": INCIDENTS_DDL}


def row(ddl: str, run_id: str) -> dict[str, object]:
    columns = [c.split(" ") for c in ddl.split(", ")]
    values: dict[str, object] = {"string": "x", "int": 1, "bigint": 1, "double": 1.0,
                                 "boolean": True, "timestamp": datetime.now(UTC)}
    return {name: values[kind] for name, kind in columns} | {"flow": "A->B", "run_id": run_id}


@pytest.mark.parametrize("table", sorted(DELTA_RS_TABLES))
def test_a_table_an_older_release_wrote_takes_the_rows_of_a_release_with_a_new_column(
    tmp_path: Path, table: str
) -> None:
    # given: the table as a release without its last column wrote it
    ddl = DELTA_RS_TABLES[table]
    older = ddl.rsplit(", ", 1)[0]
    new_column = ddl.rsplit(", ", 1)[1].split(" ")[0]
    path = str(tmp_path / table)
    append(path, older, [row(older, "old")])

    # when: this release appends its rows
    append(path, ddl, [row(ddl, "new")])

    # then: both are there; the older row has no value for the new column
    found = {r["run_id"]: r for r in DeltaTable(path).to_pyarrow_table().to_pylist()}
    assert set(found) == {"old", "new"}
    assert found["old"][new_column] is None and found["new"][new_column] is not None

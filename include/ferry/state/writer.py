"""Append to small state tables with delta-rs: no JVM (adapter).

Spark writes the offset map and runs from the copy job; steps that run without Spark (the
sync step) append their few rows here. Tables are partitioned by flow, so flows never
conflict; delta-rs retries an append that races another writer's commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a flat Spark DDL string (one definition of each table)."""
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(),
             "double": pa.float64(), "timestamp": pa.timestamp("us", tz="UTC"),
             "boolean": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in
                      (column.split(" ") for column in ddl.split(", "))])


def append(path: str, ddl: str, rows: list[dict[str, Any]]) -> None:
    """Append `rows` to the Delta table at `path` (created, partitioned by flow, if new).
    A table an older Ferry wrote without some of `ddl`'s columns takes them (its older rows
    read them as null), as the copy job's Spark appends do (`mergeSchema`)."""
    if not rows:  # before the imports: a steady sync step appends nothing, at once
        return
    import pyarrow as pa
    from deltalake import write_deltalake

    table = pa.Table.from_pylist(rows, schema=arrow_schema(ddl))
    write_deltalake(path, table, mode="append", partition_by=["flow"], schema_mode="merge")

"""Append to small state tables with delta-rs: no JVM (adapter).

Spark writes the offset map and runs from a copy job; steps that run without Spark (the
sync step) append their few rows here, and so does a continuous loop's recorder, which
appends its runs and offset map behind the copies in batches (`ferry.spark.recorder`):
a few milliseconds in the loop's own process, where a Spark append through a Connect
server shared by many flows waits its turn on the server. Tables are partitioned by flow,
so flows never conflict; delta-rs retries an append that races another writer's commit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a Spark DDL string (one definition of each table): flat types,
    and the arrays of structs the offset map's segments are."""
    import pyarrow as pa

    return pa.schema([(name, _arrow_type(kind)) for name, kind in
                      (column.split(" ", 1) for column in _top_level(ddl, ", "))])


def _arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    if kind.startswith("array<") and kind.endswith(">"):
        return pa.list_(_arrow_type(kind[len("array<"):-1]))
    if kind.startswith("struct<") and kind.endswith(">"):
        return pa.struct([(name, _arrow_type(inner)) for name, inner in
                          (field.split(":", 1)
                           for field in _top_level(kind[len("struct<"):-1], ","))])
    flat = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(),
            "double": pa.float64(), "timestamp": pa.timestamp("us", tz="UTC"),
            "boolean": pa.bool_()}
    return flat[kind]


def _top_level(text: str, separator: str) -> list[str]:
    """`text` split at each `separator` outside angle brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if text[i] == "<":
            depth += 1
        elif text[i] == ">":
            depth -= 1
        elif depth == 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            start = i = i + len(separator)
            continue
        i += 1
    return [*parts, text[start:]]


def append(path: str, ddl: str, rows: list[dict[str, Any]],
           once: tuple[str, int] | None = None) -> bool:
    """Append `rows` to the Delta table at `path` (created, partitioned by flow, if new).
    A table an older Ferry wrote without some of `ddl`'s columns takes them (its older rows
    read them as null), as the copy job's Spark appends do (`mergeSchema`).

    `once` = (application id, version): Delta's idempotent write, as Spark's `txnAppId` and
    `txnVersion` make it. Nothing is appended when that application committed that version
    or a later one already, and a writer of the same application that commits between this
    one's read and its commit makes this one's commit fail (delta-rs refuses it as a
    concurrent transaction) instead of committing the rows twice. Returns False when
    nothing was appended for that reason."""
    if not rows:  # before the imports: a steady sync step appends nothing, at once
        return True
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError, TableNotFoundError

    table = pa.Table.from_pylist(rows, schema=arrow_schema(ddl))
    if once is None:
        write_deltalake(path, table, mode="append", partition_by=["flow"], schema_mode="merge")
        return True
    try:
        # the snapshot the version is checked on is the one the commit is based on
        target: str | DeltaTable = DeltaTable(path)
    except TableNotFoundError:
        target = path
    if isinstance(target, DeltaTable):
        done = target.transaction_version(once[0])
        if done is not None and done >= once[1]:
            log.info("%s already recorded up to %d", once[0], done)
            return False
    try:
        write_deltalake(target, table, mode="append", partition_by=["flow"],
                        schema_mode="merge",
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(once[0], once[1])]))
    except CommitFailedError as exc:
        if "Concurrent transaction" not in str(exc):
            raise
        log.info("another writer recorded the same rows at the same time: %s", once[0])
        return False
    return True

"""Append to small state tables with delta-rs: no JVM (adapter).

Spark writes the offset map and runs from a copy job; steps that run without Spark (the
sync step) append their few rows here, and so does a continuous loop's recorder, which
appends its runs and offset map behind the copies in batches (`ferry.runtime.recorder`):
a few milliseconds in the loop's own process, where a Spark append through a Connect
server shared by many flows waits its turn on the server. Tables are partitioned by flow,
so flows never conflict; delta-rs retries an append that races another writer's commit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ferry.core.tables import absent, keyed_table
from ferry.errors import FerryError, TerminalError

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
    """`_append`; a table whose newest commit was torn has it set aside, and the append is
    tried again (`ferry.state.torn`)."""
    from deltalake.exceptions import DeltaError

    from ferry.state.torn import set_aside, torn_error

    try:
        return _append(path, ddl, rows, once)
    except DeltaError as exc:
        if not set_aside(path):
            if "Json error" in str(exc):
                raise TerminalError(torn_error(path, exc)) from None
            raise
    return _append(path, ddl, rows, once)


def _append(path: str, ddl: str, rows: list[dict[str, Any]],
            once: tuple[str, int] | None = None) -> bool:
    """Append `rows` to the Delta table at `path` (created, partitioned by flow, if new).
    A table an older Ferry wrote without some of `ddl`'s columns takes them (its older rows
    read them as null), as the copy job's Spark appends do (`mergeSchema`).

    `once` = (application id, version): Delta's idempotent write, as Spark's `txnAppId` and
    `txnVersion` make it. Nothing is appended when that application committed that version
    or a later one already, and a writer of the same application that commits between this
    one's read and its commit makes this one's commit fail (delta-rs refuses it as a
    concurrent transaction) instead of committing the rows twice. Returns False when
    nothing was appended for that reason.

    The offset map and `runs` (`ferry.core.tables.ROW_KEYS`) take only the rows whose key
    the table does not hold yet, each key once (`_append_absent`), so retried, repeated or
    rebuilt rows are recorded once; False when every row's key was there."""
    if not rows:  # before the imports: a steady sync step appends nothing, at once
        return True
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError, TableNotFoundError

    keyed = keyed_table(ddl)
    if keyed is not None:
        by_flow: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_flow.setdefault(row["flow"], []).append(row)
        # a list, not a generator: every flow's rows are appended
        return any([_append_absent(path, ddl, mine, keyed, once) for mine in by_flow.values()])
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


KEYED_ATTEMPTS = 20
"""How often a keyed append reads the keys again after another writer's commit overtook it
(each attempt is one read and one commit)."""


def keyed_lock(table: str, flow: str) -> str:
    """The application id every keyed append of `table`'s rows of `flow` commits with (its
    version one more than the table's): two appends that read the same snapshot cannot
    both commit, whichever writer (delta-rs, Spark) makes them."""
    return f"ferry.{table}.{flow}"


def _append_absent(path: str, ddl: str, rows: list[dict[str, Any]],
                   keyed: tuple[str, tuple[str, ...]],
                   once: tuple[str, int] | None) -> bool:
    """Append the `rows` (of one flow) whose key (`keyed`: the table and its key columns)
    the table does not hold, read from the snapshot the commit is made on. The commit carries an
    application transaction (`once`, or the table's `keyed_lock` one version up), so a
    writer of the same rows that commits between the read and the commit makes this one's
    fail; it reads again and appends what is still absent (with `once`: returns False, as
    an idempotent write that another writer overtook)."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError, TableNotFoundError

    from ferry.state.reader import present_keys

    table_name, columns = keyed
    flows = {row["flow"] for row in rows}
    assert len(flows) == 1, f"a keyed append is of one flow's rows, not {sorted(flows)}"
    (flow,) = flows
    for _ in range(KEYED_ATTEMPTS):
        try:
            target: str | DeltaTable = DeltaTable(path)
        except TableNotFoundError:
            target = path
        present: set[tuple[Any, ...]] = set()
        app, version = once if once is not None else (keyed_lock(table_name, flow), 1)
        if isinstance(target, DeltaTable):
            done = target.transaction_version(app)
            if once is not None and done is not None and done >= once[1]:
                log.info("%s already recorded up to %d", once[0], done)
                return False
            if once is None:
                version = (done or 0) + 1
            present = present_keys(target, path, flow, columns, rows)
        fresh = absent(rows, columns, present)
        if not fresh:
            log.info("the %d %s rows were recorded already", len(rows), table_name,
                     extra={"flow": flow})
            return False
        try:
            write_deltalake(target, pa.Table.from_pylist(fresh, schema=arrow_schema(ddl)),
                            mode="append", partition_by=["flow"], schema_mode="merge",
                            commit_properties=CommitProperties(
                                app_transactions=[Transaction(app, version)]))
        except CommitFailedError as exc:
            if "Concurrent transaction" not in str(exc):
                raise
            if once is not None:
                log.info("another writer recorded the same rows at the same time: %s", app)
                return False
            log.info("another writer of %s rows committed meanwhile; reading the keys again",
                     table_name, extra={"flow": flow})
            continue
        return True
    raise FerryError(f"flow {flow}: the {table_name} rows were overtaken by other writers "
                     f"{KEYED_ATTEMPTS} times in a row ({path}); the next batch or run "
                     "records them")

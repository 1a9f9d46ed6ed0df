"""Read the state tables with delta-rs: no JVM, sub-second (adapter)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ferry.core.offsetmap import MapWindow
from ferry.core.planner import Gap
from ferry.core.tables import MapRow, map_row, unrecorded
from ferry.errors import TerminalError


def open_table(path: str) -> Any | None:
    """The Delta table at `path`, None where there is none yet. A table whose newest commit
    was torn has it set aside first (`ferry.state.torn`)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    from ferry.state.torn import set_aside, torn_error

    if "://" not in path and not (Path(path) / "_delta_log").is_dir():
        return None
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None
    except DeltaError as exc:
        if not set_aside(path):
            if "Json error" in str(exc):
                raise TerminalError(torn_error(path, exc)) from None
            raise
    return open_table(path)


def dataset(table: Any, path: str, flow: str | None = None) -> Any:
    """The table's files (of one `flow` only, when given: every state table is partitioned
    by flow) as a pyarrow dataset.

    A local table is read through Arrow's own filesystem. delta-rs's default is a Python
    filesystem, which Arrow's reading threads call into, and so take the GIL, while a
    read's last buffers are released: in a process that ends right after a read, such a
    thread is stopped as the interpreter finalizes, inside C++ frames, and the process
    aborts ("terminate called without an active exception") after its work is done. A
    URI keeps delta-rs's filesystem; every entry point ends its process with `os._exit`.

    One flow's files are pruned as the dataset is built, not by a filter on a dataset of
    every file: a dataset of the whole table is built from every file's statistics, which
    took 1.3 s at 600 files (twenty flows' batches) where one flow's took 0.1 s. (delta-rs
    deprecates `partitions` for `file_pruning_predicate`, which took 0.75 s here.)"""
    import warnings

    from pyarrow import fs

    native = (None if "://" in path else
              fs.SubTreeFileSystem(str(Path(path).resolve()), fs.LocalFileSystem()))
    partitions = None if flow is None else [("flow", "=", flow)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return table.to_pyarrow_dataset(partitions=partitions, filesystem=native)


def rows(path: str, flow: str, **equal: object) -> list[dict[str, Any]]:
    """Rows of one flow (partition pruned), filtered by column equality."""
    import pyarrow.dataset as ds

    table = open_table(path)
    if table is None:
        return []
    condition = ds.scalar(True)
    for column, value in equal.items():
        condition = condition & (ds.field(column) == value)
    result: list[dict[str, Any]] = dataset(table, path, flow).to_table(
        filter=condition).to_pylist()
    return result


def recorded_run_ids(path: str, flow: str, run_ids: set[str]) -> set[str]:
    """Which of `run_ids` have rows in the `runs` table: only the run_id column of the
    files whose statistics may hold them is read, so the cost follows the runs asked
    about, not the table's history."""
    import pyarrow.dataset as ds

    table = open_table(path)
    if table is None or not run_ids:
        return set()
    found = dataset(table, path, flow).to_table(
        columns=["run_id"], filter=ds.field("run_id").isin(sorted(run_ids)))
    return set(found.column("run_id").to_pylist())


def recorded_ranges(path: str, flow: str, run_ids: Collection[str]
                    ) -> dict[tuple[str, str, int], list[tuple[int, int]]]:
    """(run id, topic, partition) -> the ranges `[start, end)` of the `runs` rows of
    `run_ids` (`ferry.core.tables.covered`): four columns of the files whose statistics
    may hold those runs."""
    import pyarrow.dataset as ds

    table = open_table(path)
    if table is None or not run_ids:
        return {}
    found = dataset(table, path, flow).to_table(
        columns=["run_id", "topic", "partition", "range_start", "range_end"],
        filter=ds.field("run_id").isin(sorted(run_ids)))
    ranges: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    for run, topic, partition, start, end in zip(
            *(found.column(c).to_pylist() for c in found.column_names), strict=True):
        ranges.setdefault((run, topic, partition), []).append((start, end))
    return ranges


def present_keys(table: Any, path: str, flow: str, columns: Sequence[str],
                 rows: Sequence[Mapping[str, Any]]) -> set[tuple[Any, ...]]:
    """The keys (`ferry.core.tables.row_key` of `columns`) among `rows`' that the flow's
    rows of `table` (a snapshot: the version an append commits on) hold already. Only the
    key columns of the files whose statistics may hold them are read."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from ferry.core.tables import RANGE_ENDS, RANGE_SCOPE, held_keys

    if not rows:
        return set()
    files = dataset(table, path, flow)
    names = set(files.schema.names)
    condition = ds.scalar(True)
    read = list(columns)
    for column in columns:
        if column == "flow":
            continue
        if column not in names:  # a table of an older release: none of its rows has the key
            return set()
        values = {r.get(column) for r in rows}
        known = sorted(v for v in values if v is not None and v != "")
        kind = files.schema.field(column).type
        matches = ds.field(column).isin(pa.array(known, type=kind)) if known \
            else ds.scalar(False)
        end = RANGE_ENDS.get(column)
        if end is not None and end in names and known:  # a folded row holds its range
            read += [end, *RANGE_SCOPE.get(column, ())]
            matches = matches | (ds.field(end).is_valid() & (ds.field(column) <= known[-1])
                                 & (ds.field(end) >= known[0]))
        if None in values or "" in values:  # the key's empty value: null or "" in the table
            matches = matches | ds.field(column).is_null()
            if pa.types.is_string(kind):
                matches = matches | (ds.field(column) == "")
        condition = condition & matches
    found = files.to_table(columns=read, filter=condition).to_pylist()
    return held_keys(columns, found, rows)


def transaction_version(path: str, app_id: str) -> int | None:
    """The version of the last idempotent write of `app_id` to the table (Delta's
    SetTransaction), None when it never wrote there."""
    table = open_table(path)
    if table is None:
        return None
    version = table.transaction_version(app_id)
    return None if version is None else int(version)


def unrecorded_gaps(path: str, flow: str, gaps: Sequence[Gap]) -> list[Gap]:
    """The gaps not in the `gaps` table yet (`ferry.core.tables.unrecorded`)."""
    return unrecorded(gaps, rows(path, flow)) if gaps else []


def last_steps(path: str, flow: str) -> dict[str, datetime]:
    """When each step of the flow last ran, from the `syncs` table."""
    table = open_table(path)
    if table is None:
        return {}
    found = dataset(table, path, flow).to_table(columns=["step", "synced_at"])
    grouped = found.group_by("step").aggregate([("synced_at", "max")])
    return dict(zip(grouped.column("step").to_pylist(),
                    grouped.column("synced_at_max").to_pylist(), strict=True))


def max_map_offsets(path: str, flow: str) -> dict[str, int]:
    """Map topic ID -> the highest offset-map topic offset the Delta table holds for the
    flow from that topic ("" for rows of an older Ferry, which recorded no ID; a folded
    row holds offsets up to its `map_offset_end`): one read of the flow's files' offset
    columns."""
    import pyarrow.compute as pc

    table = open_table(path)
    if table is None:
        return {}
    files = dataset(table, path, flow)
    if "map_topic_id" not in files.schema.names:
        column = files.to_table(columns=["map_offset"]).column("map_offset")
        value = pc.max(column).as_py() if len(column) else None
        return {} if value is None else {"": int(value)}
    read = ["map_offset", "map_topic_id"]
    if "map_offset_end" in files.schema.names:  # a folded row stands for offsets up to its end
        read.append("map_offset_end")
    found = files.to_table(columns=read)
    if "map_offset_end" in read:
        found = found.set_column(0, "map_offset", pc.max_element_wise(
            found.column("map_offset"), found.column("map_offset_end"), skip_nulls=True))
    grouped = found.group_by("map_topic_id").aggregate([("map_offset", "max")])
    by_id: dict[str, int] = {}
    for topic_id, value in zip(grouped.column("map_topic_id").to_pylist(),
                               grouped.column("map_offset_max").to_pylist(), strict=True):
        if value is not None:
            key = topic_id or ""
            by_id[key] = max(by_id.get(key, -1), int(value))
    return by_id


def map_rows(path: str, flow: str, topics: Collection[str] | None = None,
             windows: Collection[MapWindow] | None = None) -> list[MapRow]:
    """The flow's offset-map entries (of `topics` only, when given), each with its offset in
    the offset-map topic (resolve overlaps with `ferry.core.offsetmap.latest_cover`). With
    `windows`, only the rows each reads of its source partition (those that end after its
    offset, and those that end last, per source topic incarnation): filtered as the files
    are read, so a look-up reads what is recent however long the partition has been
    mirrored."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    table = open_table(path)
    if table is None or (topics is not None and not topics) or (
            windows is not None and not windows):
        return []
    condition = ds.scalar(True)
    if topics is not None:
        condition = ds.field("source_topic").isin(sorted(topics))
    files = dataset(table, path, flow)
    if windows is None:
        return [map_row(r) for r in files.to_table(filter=condition).to_pylist()]
    # Which rows, from their offset columns only; then those rows whole, in one read (a
    # read of the segments decodes every row group the filter keeps).
    mine = condition & _any(_partition(w.topic, w.partition) for w in windows)
    keys = [c for c in ("map_topic_id", "map_offset") if c in files.schema.names]
    after = files.to_table(columns=keys, filter=mine & _any(
        _partition(w.topic, w.partition) & (ds.field("covered_end") > w.ends_after)
        for w in windows))
    # and each partition's rows that end last, per source topic incarnation: where the
    # current incarnation's mirrored range ends when only an older one's rows end after
    # the offset (a look-up or a translation past everything of a recreated topic)
    by = ["source_topic", "source_partition"] + (
        ["source_topic_id"] if "source_topic_id" in files.schema.names else [])
    ends = files.to_table(columns=[*by, "covered_end"], filter=mine).group_by(by).aggregate(
        [("covered_end", "max")])
    last = [_partition(group[0], group[1]) & _incarnation(group[2:])
            & (ds.field("covered_end") == end)
            for *group, end in zip(*(ends.column(c).to_pylist()
                                     for c in [*by, "covered_end_max"]), strict=True)]
    if last:
        after = pa.concat_tables([after, files.to_table(columns=keys,
                                                        filter=mine & _any(last))])
    if not after.num_rows:
        return []
    offsets = pc.unique(after.column("map_offset"))
    found = files.to_table(filter=mine & ds.field("map_offset").isin(offsets)).to_pylist()
    wanted = set(zip(*(after.column(c).to_pylist() for c in keys), strict=True))
    return [map_row(r) for r in found if tuple(r[c] for c in keys) in wanted]


def _incarnation(source_id: list[Any]) -> Any:
    """Rows of the source topic incarnation `source_id` ([] when the table has no IDs)."""
    import pyarrow.dataset as ds

    if not source_id:
        return ds.scalar(True)
    return ds.field("source_topic_id").is_null() if source_id[0] is None \
        else ds.field("source_topic_id") == source_id[0]


def _partition(topic: str, partition: int) -> Any:
    import pyarrow.dataset as ds

    return (ds.field("source_topic") == topic) & (ds.field("source_partition") == partition)


def _any(conditions: Iterable[Any]) -> Any:
    import functools
    import operator

    return functools.reduce(operator.or_, conditions)

"""Read the state tables with delta-rs: no JVM, sub-second (adapter)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ferry.core.planner import Gap
from ferry.core.tables import MapRow, map_row, unrecorded


def _table(path: str) -> Any | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    if "://" not in path and not (Path(path) / "_delta_log").is_dir():
        return None
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def rows(path: str, flow: str, **equal: object) -> list[dict[str, Any]]:
    """Rows of one flow (partition pruned), filtered by column equality."""
    import pyarrow.dataset as ds

    table = _table(path)
    if table is None:
        return []
    condition = ds.field("flow") == flow
    for column, value in equal.items():
        condition = condition & (ds.field(column) == value)
    result: list[dict[str, Any]] = table.to_pyarrow_dataset().to_table(
        filter=condition).to_pylist()
    return result


def recorded_run_ids(path: str, flow: str, run_ids: set[str]) -> set[str]:
    """Which of `run_ids` have rows in the `runs` table: only the run_id column of the
    files whose statistics may hold them is read, so the cost follows the runs asked
    about, not the table's history."""
    import pyarrow.dataset as ds

    table = _table(path)
    if table is None or not run_ids:
        return set()
    condition = (ds.field("flow") == flow) & ds.field("run_id").isin(sorted(run_ids))
    found = table.to_pyarrow_dataset().to_table(columns=["run_id"], filter=condition)
    return set(found.column("run_id").to_pylist())


def transaction_version(path: str, app_id: str) -> int | None:
    """The version of the last idempotent write of `app_id` to the table (Delta's
    SetTransaction), None when it never wrote there."""
    table = _table(path)
    if table is None:
        return None
    version = table.transaction_version(app_id)
    return None if version is None else int(version)


def unrecorded_gaps(path: str, flow: str, gaps: Sequence[Gap]) -> list[Gap]:
    """The gaps not in the `gaps` table yet (`ferry.core.tables.unrecorded`)."""
    return unrecorded(gaps, rows(path, flow)) if gaps else []


def last_steps(path: str, flow: str) -> dict[str, datetime]:
    """When each step of the flow last ran, from the `syncs` table."""
    import pyarrow.dataset as ds

    table = _table(path)
    if table is None:
        return {}
    found = table.to_pyarrow_dataset().to_table(
        columns=["step", "synced_at"], filter=ds.field("flow") == flow)
    grouped = found.group_by("step").aggregate([("synced_at", "max")])
    return dict(zip(grouped.column("step").to_pylist(),
                    grouped.column("synced_at_max").to_pylist(), strict=True))


def max_map_offset(path: str, flow: str, map_topic_id: str | None = None) -> int:
    """The highest offset-map topic offset the Delta table holds for the flow: of rows
    read from the map topic with ID `map_topic_id` ("" for rows of an older Ferry, which
    recorded no ID; None for any row); -1 for none."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    table = _table(path)
    if table is None:
        return -1
    dataset = table.to_pyarrow_dataset()
    condition = ds.field("flow") == flow
    has_ids = "map_topic_id" in dataset.schema.names
    if map_topic_id is not None and has_ids:
        column = ds.field("map_topic_id")
        condition = condition & ((column == map_topic_id) | column.is_null() if not map_topic_id
                                 else column == map_topic_id)
    elif map_topic_id:  # a table without the column holds no row of an identified topic
        return -1
    column = dataset.to_table(columns=["map_offset"], filter=condition).column("map_offset")
    value = pc.max(column).as_py() if len(column) else None
    return -1 if value is None else int(value)


def map_rows(path: str, flow: str, topics: Collection[str] | None = None
             ) -> list[MapRow]:
    """The flow's offset-map entries (of `topics` only, when given), each with its offset in
    the offset-map topic (resolve overlaps with `ferry.core.offsetmap.latest_cover`)."""
    import pyarrow.dataset as ds

    table = _table(path)
    if table is None or (topics is not None and not topics):
        return []
    condition = ds.field("flow") == flow
    if topics is not None:
        condition = condition & ds.field("source_topic").isin(sorted(topics))
    return [map_row(r) for r in table.to_pyarrow_dataset().to_table(filter=condition).to_pylist()]

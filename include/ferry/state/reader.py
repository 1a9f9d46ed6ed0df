"""Read the state tables with delta-rs: no JVM, sub-second (adapter)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from pathlib import Path
from typing import Any

from ferry.offsetmap import MapEntry, Segment


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


def max_map_offset(path: str, flow: str) -> int:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    table = _table(path)
    if table is None:
        return -1
    column = table.to_pyarrow_dataset().to_table(
        columns=["map_offset"], filter=ds.field("flow") == flow).column("map_offset")
    value = pc.max(column).as_py() if len(column) else None
    return -1 if value is None else int(value)


def latest_cover(entries: list[tuple[int, MapEntry]]) -> list[MapEntry]:
    """Entries in source order, where overlapping ones (an at_least_once crash, or positions
    reset after a source topic was recreated) resolve to the later one (higher offset in
    the offset-map topic). `entries` are (topic offset, entry) pairs."""
    kept: list[MapEntry] = []
    for _, entry in sorted(entries, key=lambda pair: pair[0], reverse=True):
        start, end = entry.covered_start, entry.covered_end
        if start == end or all(end <= k.covered_start or start >= k.covered_end for k in kept):
            kept.append(entry)
    return sorted(kept, key=lambda e: e.covered_start)


def map_rows(path: str, flow: str, topics: Collection[str] | None = None
             ) -> list[tuple[int, MapEntry]]:
    """The flow's offset-map entries (of `topics` only, when given), each with its offset in
    the offset-map topic (resolve overlaps with `latest_cover`)."""
    import pyarrow.dataset as ds

    table = _table(path)
    if table is None or (topics is not None and not topics):
        return []
    condition = ds.field("flow") == flow
    if topics is not None:
        condition = condition & ds.field("source_topic").isin(sorted(topics))
    return _entries(table.to_pyarrow_dataset().to_table(filter=condition).to_pylist())


def _entries(found: list[dict[str, Any]]) -> list[tuple[int, MapEntry]]:
    return [(r["map_offset"], MapEntry(
        flow=r["flow"], run_id=r["run_id"], lane=r["lane"], source_topic=r["source_topic"],
        source_partition=r["source_partition"], target_topic=r["target_topic"],
        target_partition=r["target_partition"], covered_start=r["covered_start"],
        covered_end=r["covered_end"],
        segments=tuple(Segment(s["source_start"], s["target_start"], s["count"])
                       for s in r["segments"]),
        committed_at_ms=int(r["committed_at"].timestamp() * 1000),
        target_end=r.get("target_end"))) for r in found]

"""Read the state tables with delta-rs: no JVM, sub-second (adapter)."""

from __future__ import annotations

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


def map_entries(path: str, flow: str, topic: str, partition: int) -> list[MapEntry]:
    """One source partition's offset-map entries, in source order.

    at_least_once only: a run that crashed after writing an entry but before committing
    its positions leaves that entry behind, and the next run writes another from the same
    start; the later one (higher topic offset) describes the records that count."""
    found = rows(path, flow, source_topic=topic, source_partition=partition)
    latest = {r["covered_start"]: r for r in sorted(found, key=lambda r: r["map_offset"])}
    found = list(latest.values())
    entries = [MapEntry(
        flow=r["flow"], run_id=r["run_id"], lane=r["lane"], source_topic=r["source_topic"],
        source_partition=r["source_partition"], target_topic=r["target_topic"],
        target_partition=r["target_partition"], covered_start=r["covered_start"],
        covered_end=r["covered_end"],
        segments=tuple(Segment(s["source_start"], s["target_start"], s["count"])
                       for s in r["segments"]),
        committed_at_ms=int(r["committed_at"].timestamp() * 1000)) for r in found]
    return sorted(entries, key=lambda e: e.covered_start)

"""Fold the Delta offset map's settled entries, one flow at a time (adapter; the folding
rules are `ferry.core.coalescing`).

Why this is safe next to running flows:

- Only entries committed before the settle time are read and replaced (one commit per
  flow: Delta's overwrite of the rows its predicate matches, `flow` and `committed_at`
  before that time). Writers append entries from the seconds or minutes before they
  append, so the rows they add never match the predicate.
- The commit carries the offset map's keyed-writer application transaction one version
  up (`ferry.state.writer.keyed_lock`), as every keyed append does: an append that read
  the keys before this commit fails and reads them again, and reads a folded entry as
  present (`ferry.state.reader.present_keys` reads `map_offset..map_offset_end`).
- A conflict with another writer's commit changes nothing; the flow is folded on the
  next run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ferry.core.coalescing import StoredEntry, coalesce
from ferry.core.retention import FoldedPartition
from ferry.core.tables import OFFSET_MAP_DDL, map_row, offset_map_row

log = logging.getLogger(__name__)


def fold_offset_map(path: str, settled_before: datetime, dry_run: bool = False,
                    snapshot: Any | None = None
                    ) -> tuple[tuple[FoldedPartition, ...], tuple[str, ...]]:
    """Fold each flow's entries committed before `settled_before` (read from `snapshot`,
    a DeltaTable, when given: the latest version otherwise); returns what was folded (or,
    in a dry run, would be) and the flows whose commit lost to another writer's."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    from ferry.state.reader import dataset

    table = snapshot if snapshot is not None else DeltaTable(path)
    folded: list[FoldedPartition] = []
    lost: list[str] = []
    for flow in _flows(table):
        rows = dataset(table, path, flow).to_table(
            filter=ds.field("committed_at") < settled_before).to_pylist()
        stored = [(_stored(r), r) for r in rows]
        kept = coalesce((s for s, _ in stored), int(settled_before.timestamp() * 1000))
        if len(kept) == len(rows):
            continue
        # a row left as it was is written back exactly (its time to the microsecond); a
        # folded one from its first row's
        first = {(s.map_topic_id, s.first): (s, r) for s, r in stored}
        out = []
        for k in kept:
            s, r = first[k.map_topic_id, k.first]
            out.append(dict(r) if k is s else offset_map_row(
                k.entry, r["map_topic"], k.first, k.map_topic_id, k.last))
        if dry_run or _replace(table, flow, settled_before, out):
            folded.append(FoldedPartition(flow, len(rows), len(kept)))
            if not dry_run:
                log.info("offset map: %d settled entries folded into %d rows", len(rows),
                         len(kept), extra={"flow": flow})
        else:
            lost.append(flow)
    return tuple(folded), tuple(lost)


def _flows(table: Any) -> list[str]:
    """The flows whose partitions the table's snapshot holds files of."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    if "partition.flow" not in actions.column_names:
        return []
    return sorted({f for f in actions.column("partition.flow").to_pylist() if f is not None})


def _stored(row: Mapping[str, Any]) -> StoredEntry:
    found = map_row(row)
    return StoredEntry(found.map_topic_id, found.offset, max(found.last, found.offset),
                       found.entry)


def _replace(table: Any, flow: str, settled_before: datetime,
             out: list[dict[str, Any]]) -> bool:
    """Replace the flow's settled rows with `out` in one commit; False when another
    writer committed first (nothing changed)."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    from ferry.state.writer import arrow_schema, keyed_lock

    app = keyed_lock("offset_map", flow)
    version = (table.transaction_version(app) or 0) + 1
    quoted = flow.replace("'", "''")
    moment = settled_before.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        write_deltalake(table, pa.Table.from_pylist(out, schema=arrow_schema(OFFSET_MAP_DDL)),
                        mode="overwrite", partition_by=["flow"], schema_mode="merge",
                        predicate=f"flow = '{quoted}' AND committed_at < '{moment}'",
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(app, version)]))
    except CommitFailedError as exc:
        log.warning("folding the offset map lost to a concurrent change, retried next "
                    "run: %s", exc, extra={"flow": flow})
        return False
    return True

"""Fold, compact and vacuum the Delta state tables with delta-rs, while flows keep
writing (adapter; the decisions are `ferry.core.retention`; the offset map's settled
entries are folded first, `ferry.state.coalesce`).

Why this is safe next to running flows:

- Compaction is a rewrite (`dataChange=false`): delta-rs commits it with conflict
  resolution, so appends by Spark (the copy job) or delta-rs (sync, checkpoints, verify)
  that commit meanwhile are kept: compaction only removes the files it read, and appends
  never read. Each flow partition is its own commit, so a conflict costs one partition.
- Nothing is deleted that a snapshot still references, nor anything younger than the
  retention (at least `SAFE_MINIMUM_RETENTION_HOURS`): readers holding an older snapshot
  keep reading the files compaction replaced.
- Vacuum runs in delta-rs's *lite* mode (it deletes expired tombstones only); its *full*
  mode would delete data files a writer has written but not committed yet. Stray files
  are swept by age instead (`ferry.core.retention.sweep`).

Tables written by delta-spark 4.4.0 are protocol 1/2 without table features, which
delta-rs writes (checked by the integration tests on tables the `spark` fixture wrote).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ferry.config import Config
from ferry.core.retention import (
    DEFAULT_RETENTION_HOURS,
    WHOLE_TABLE,
    CompactedPartition,
    CompactionPolicy,
    DataFile,
    FoldedPartition,
    MaintenanceReport,
    PartitionPlan,
    StoredFile,
    TableReport,
    check_retention,
    compaction_plan,
    effective_retention,
    state_dirs,
    state_tables,
    sweep,
    unlisted,
)
from ferry.core.tables import StatePaths
from ferry.errors import TerminalError, UsageError

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyarrow.fs import FileSystem

log = logging.getLogger(__name__)


def maintain(config: Config, retention_hours: int = DEFAULT_RETENTION_HOURS,
             dry_run: bool = False, *, tables: Sequence[str] | None = None,
             policy: CompactionPolicy | None = None,
             option: str = "--retention-hours") -> MaintenanceReport:
    """Compact, checkpoint and vacuum every state table (or only `tables`) in every state
    directory of the config's enabled flows. `dry_run` changes nothing and reports what
    would be done. A retention below the safe minimum is a UsageError naming `option`."""
    check_retention(retention_hours, option)
    known = state_tables()
    names = tuple(tables) if tables is not None else known
    wrong = [n for n in names if n not in known]
    if wrong:
        raise UsageError(f"unknown state table {', '.join(wrong)}: choose from "
                         f"{', '.join(known)}")
    reports = tuple(maintain_table(StatePaths(root).table(name), name, retention_hours,
                                   dry_run, policy or CompactionPolicy())
                    for root in state_dirs(config) for name in names)
    return MaintenanceReport(retention_hours, dry_run, reports)


def maintain_table(path: str, name: str, retention_hours: int, dry_run: bool = False,
                   policy: CompactionPolicy | None = None) -> TableReport:
    """One table: fold the offset map's settled entries (`ferry.state.coalesce`), compact
    the flow partitions the policy picks, checkpoint, vacuum, clean up expired log files.
    `retention_hours` is taken as given here (`maintain` checks it): tests use 0 to see
    vacuum at work."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaProtocolError

    if not DeltaTable.is_deltatable(path):
        return TableReport(name, path, present=False, retention_hours=retention_hours)
    policy = policy or CompactionPolicy()
    before = data_files(DeltaTable(path))  # what the report starts from
    folded: tuple[FoldedPartition, ...] = ()
    fold_conflicts: tuple[str, ...] = ()
    if name == "offset_map":  # rows first: compaction then rewrites fewer, larger files
        from ferry.state.coalesce import fold_offset_map

        settled = datetime.now(UTC) - timedelta(seconds=policy.fold_after_s)
        folded, fold_conflicts = fold_offset_map(path, settled, dry_run)
    table = DeltaTable(path)
    plan = compaction_plan(data_files(table) if folded and not dry_run else before, policy)
    try:
        if dry_run:
            compacted = tuple(CompactedPartition(p.partition, p.files, None) for p in plan)
            conflicts: tuple[str, ...] = ()
        else:
            compacted, conflicts = compact(table, plan, policy)
    except DeltaProtocolError as exc:
        raise TerminalError(
            f"{path}: delta-rs cannot rewrite this table ({exc}); compact it with Spark "
            "(OPTIMIZE) or keep the state tables on features delta-rs writes") from None
    checkpointed = bool(compacted or folded) and not dry_run
    if checkpointed:
        # Readers replay the log from the last checkpoint: start them after compaction.
        table.create_checkpoint()
    retention = effective_retention(retention_hours, table.metadata().configuration)
    vacuumed = vacuum(table, path, retention, dry_run)
    if not dry_run:
        table.cleanup_metadata()
    after = before if dry_run else data_files(DeltaTable(path))
    report = TableReport(
        table=name, path=path, files_before=len(before), files_after=len(after),
        bytes_before=sum(f.bytes for f in before), bytes_after=sum(f.bytes for f in after),
        compacted=compacted, conflicts=conflicts, vacuumed_files=vacuumed.files,
        vacuumed_bytes=vacuumed.bytes, swept_files=vacuumed.swept,
        retention_hours=retention, checkpointed=checkpointed, warnings=vacuumed.warnings,
        folded=folded, fold_conflicts=fold_conflicts)
    log.info("%s", report.text(dry_run))
    return report


def data_files(table: DeltaTable) -> list[DataFile]:
    """The files the table's snapshot references, with their flow partition."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    partitioned = "flow" in table.metadata().partition_columns
    paths = actions.column("path").to_pylist() if actions.num_rows else []
    sizes = actions.column("size_bytes").to_pylist() if actions.num_rows else []
    flows: list[Any] = (actions.column("partition.flow").to_pylist()
                        if partitioned and "partition.flow" in actions.column_names
                        else [WHOLE_TABLE] * len(paths))
    # Add actions hold URL-encoded paths; storage and vacuum speak the decoded ones.
    return [DataFile(unquote(p), int(s), f) for p, s, f in zip(paths, sizes, flows,
                                                                 strict=True)]


def compact(table: DeltaTable, plan: Sequence[PartitionPlan], policy: CompactionPolicy
            ) -> tuple[tuple[CompactedPartition, ...], tuple[str, ...]]:
    """Compact each planned partition in its own commit, from `table`'s snapshot (which may
    be older than the latest version: delta-rs rebases over concurrent appends). Returns
    what was compacted and the partitions that lost to a conflicting change."""
    from deltalake.exceptions import CommitFailedError

    done: list[CompactedPartition] = []
    lost: list[str] = []
    for part in plan:
        where = None if part.partition == WHOLE_TABLE else [("flow", "=", part.partition)]
        try:
            metrics = table.optimize.compact(partition_filters=where,
                                             target_size=policy.target_bytes)
        except CommitFailedError as exc:
            log.warning("compaction of %s lost to a concurrent change, retried next run: %s",
                        part.partition, exc, extra={"flow": part.partition})
            lost.append(part.partition)
            continue
        files_after = part.files - int(metrics["numFilesRemoved"]) + int(
            metrics["numFilesAdded"])
        done.append(CompactedPartition(part.partition, part.files, files_after))
    return tuple(done), tuple(lost)


@dataclass(frozen=True)
class Vacuumed:
    files: int
    bytes: int
    swept: int
    warnings: tuple[str, ...]


def vacuum(table: DeltaTable, path: str, retention_hours: int, dry_run: bool) -> Vacuumed:
    """Delete (or list, in a dry run) the tombstones older than the retention, and the
    stray data files `sweep` picks. Storage is listed between two snapshots, so a file
    committed meanwhile counts as referenced; the sweep is skipped, with a warning, when a
    referenced file is missing from the listing (paths not understood: delete nothing)."""
    table.update_incremental()
    referenced = {f.path for f in data_files(table)}
    filesystem, root = _filesystem(path)
    stored = _listing(filesystem, root)
    table.update_incremental()
    referenced_now = {f.path for f in data_files(table)}
    every_tombstone = set(table.vacuum(retention_hours=0, dry_run=True,
                                       enforce_retention_duration=False))
    present = {f.path: f.bytes for f in stored}
    # delta-rs lists every expired tombstone, also those whose file is gone already: only
    # the ones still stored count, and only they are worth a vacuum (which commits twice).
    expired = {p for p in table.vacuum(retention_hours=retention_hours, dry_run=True,
                                       enforce_retention_duration=False) if p in present}
    warnings: tuple[str, ...] = ()
    missing = unlisted(stored, referenced)
    if missing:
        warnings = (f"{len(missing)} referenced files are not where storage lists them "
                    f"(e.g. {missing[0]}): no stray file swept",)
        strays: list[StoredFile] = []
    else:
        strays = sweep(stored, referenced | referenced_now, every_tombstone, expired,
                       time.time(), retention_hours)
    if not dry_run:
        if expired:
            # enforce_retention_duration=False: Ferry's own minimum was checked, and a
            # table's own longer retention is already in `retention_hours`.
            table.vacuum(retention_hours=retention_hours, dry_run=False,
                         enforce_retention_duration=False)
        for stray in strays:
            with contextlib.suppress(FileNotFoundError):  # gone already: fine
                filesystem.delete_file(f"{root}/{stray.path}")
    deleted = [*sorted(expired), *(s.path for s in strays)]
    return Vacuumed(files=len(deleted), bytes=sum(present[p] for p in deleted),
                    swept=len(strays), warnings=warnings)


def _filesystem(path: str) -> tuple[FileSystem, str]:
    from pyarrow import fs

    if "://" in path:
        filesystem, root = fs.FileSystem.from_uri(path)
        return filesystem, root.rstrip("/")
    return fs.LocalFileSystem(), os.path.abspath(path)


def _listing(filesystem: FileSystem, root: str) -> list[StoredFile]:
    """Every file under the table root except inside `_`/`.` directories (the log: often
    thousands of files, and never swept)."""
    from pyarrow import fs

    found: list[StoredFile] = []
    pending = list(filesystem.get_file_info(fs.FileSelector(root)))
    for info in pending:
        name = info.path.rsplit("/", 1)[-1]
        if info.type == fs.FileType.Directory:
            if not name.startswith(("_", ".")):
                pending.extend(filesystem.get_file_info(fs.FileSelector(info.path)))
        elif info.type == fs.FileType.File:
            found.append(StoredFile(info.path[len(root):].lstrip("/"), int(info.size),
                                    info.mtime.timestamp()))
    return found

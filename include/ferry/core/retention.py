"""Housekeeping of the Delta state tables, the pure part: which tables, which partitions
need compacting, how long replaced files are kept, which stray files may go, the report.

Every flow run appends a few small files to each state table; readers (the planner of an
idle cycle, checkpoints, `ferry status`) then open more files every run. Compaction
rewrites a flow partition's small files into few large ones. It never deletes anything:
the replaced files stay readable, as *tombstones* in the Delta log, for readers holding an
older snapshot. Vacuum deletes them once they are older than the retention.

Retention contract:

- Nothing younger than the retention is deleted, and the retention is never below
  `SAFE_MINIMUM_RETENTION_HOURS`: longer than any flow run or reader holds a snapshot,
  and longer than any writer takes between writing a data file and committing it.
- A table that sets `delta.deletedFileRetentionDuration` longer than asked keeps its own.
- Delta's checkpoints drop tombstones older than the table's tombstone retention (7 days
  by default); delta-rs's vacuum only sees tombstones still in the log, so a file whose
  tombstone expired before a vacuum ran would stay forever. `sweep` finds such files (and
  files of writers that died before committing) the way Spark's VACUUM does: a data file
  no snapshot references, not a tombstone, and older than the retention by its
  modification time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ferry.config import Config
from ferry.core.tables import StatePaths
from ferry.errors import UsageError

DEFAULT_RETENTION_HOURS = 168
"""Delta's own default tombstone retention (7 days)."""
SAFE_MINIMUM_RETENTION_HOURS = 24
"""No retention below this: a flow run, a backfill chunk or a reader holds a snapshot for
minutes, and a writer commits its data files within its run."""
WHOLE_TABLE = "*"
"""The partition name of a table that is not partitioned by flow."""


def state_tables(paths: type[StatePaths] = StatePaths) -> tuple[str, ...]:
    """The state tables' names, in declaration order, from `StatePaths`, the one place
    tables are declared: every property that is `table(<its own name>)`. A table added
    there (e.g. a `lag` property) is maintained without a change here."""
    probe = paths("/")
    members = {name: member for klass in reversed(paths.__mro__)
               for name, member in vars(klass).items()}
    return tuple(name for name, member in members.items()
                 if isinstance(member, property) and getattr(probe, name) == probe.table(name))


def state_dirs(config: Config) -> tuple[str, ...]:
    """The distinct `ferry.state.dir` of the enabled flows (flows may share one)."""
    return tuple(sorted({flow.ferry.state_dir for flow in config.enabled_flows}))


def check_retention(hours: int, option: str = "--retention-hours") -> int:
    """`hours`, when it keeps readers safe; else a UsageError naming the value and the fix
    (`option` is how the caller's user sets it)."""
    if hours < SAFE_MINIMUM_RETENTION_HOURS:
        raise UsageError(
            f"retention {hours} hours is below the safe minimum of "
            f"{SAFE_MINIMUM_RETENTION_HOURS} hours (flow runs and readers may still read the "
            f"files compaction replaced); set {option} to {SAFE_MINIMUM_RETENTION_HOURS} or "
            f"more (default {DEFAULT_RETENTION_HOURS})")
    return hours


_UNIT_HOURS = {"nanosecond": 1 / 3.6e12, "microsecond": 1 / 3.6e9, "millisecond": 1 / 3.6e6,
               "second": 1 / 3600, "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0}
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+([a-z]+?)s?\s*$", re.IGNORECASE)
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"


def table_retention_hours(configuration: Mapping[str, str | None]) -> float | None:
    """The table's own tombstone retention (`interval 7 days`) in hours; None when the
    table does not set it (or sets something unreadable: then Delta's default applies)."""
    match = _INTERVAL.match(configuration.get(RETENTION_PROPERTY) or "")
    if not match or match.group(2).lower() not in _UNIT_HOURS:
        return None
    return int(match.group(1)) * _UNIT_HOURS[match.group(2).lower()]


def effective_retention(requested: int, configuration: Mapping[str, str | None]) -> int:
    """Whole hours to keep replaced files: the requested retention, or the table's own when
    it is longer (an operator who set it on the table meant it)."""
    own = table_retention_hours(configuration)
    return requested if own is None else max(requested, math.ceil(own))


@dataclass(frozen=True)
class DataFile:
    """A data file a table's current snapshot references."""

    path: str
    """Relative to the table root, as stored (decoded)."""
    bytes: int
    partition: str | None
    """The flow, or WHOLE_TABLE for a table not partitioned by flow; None for a row
    without a flow (Ferry writes none), which compaction leaves alone."""


@dataclass(frozen=True)
class CompactionPolicy:
    min_small_files: int = 10
    """Compact a partition once it has this many files below `target_bytes`."""
    target_bytes: int = 128 * 1024 * 1024
    """The size compaction aims at; files at or above it are left alone."""
    fold_after_s: int = 3600
    """Offset-map entries fold (`ferry.core.coalescing`) once committed this long ago:
    writers append entries within minutes of their commit, and an hour of a flow's
    entries stays as written for whoever reads them back."""


@dataclass(frozen=True)
class FoldedPartition:
    """A flow's offset-map rows before and after its settled entries were folded."""

    partition: str
    rows_before: int
    rows_after: int


@dataclass(frozen=True)
class PartitionPlan:
    partition: str
    files: int
    small_files: int
    bytes: int


def compaction_plan(files: Iterable[DataFile], policy: CompactionPolicy
                    ) -> tuple[PartitionPlan, ...]:
    """The partitions worth compacting, by name: those with at least
    `policy.min_small_files` files below the target size. Fewer small files are left
    alone, so a maintenance run on a quiet table changes nothing."""
    by_partition: dict[str, list[DataFile]] = {}
    for data in files:
        if data.partition is not None:
            by_partition.setdefault(data.partition, []).append(data)
    plans = []
    for partition, found in sorted(by_partition.items()):
        small = sum(1 for f in found if f.bytes < policy.target_bytes)
        if small >= max(policy.min_small_files, 2):  # one small file has nothing to merge
            plans.append(PartitionPlan(partition, len(found), small, sum(f.bytes for f in found)))
    return tuple(plans)


@dataclass(frozen=True)
class StoredFile:
    """A file found in storage under a table's root."""

    path: str
    """Relative to the table root, `/`-separated, decoded."""
    bytes: int
    modified: float
    """Seconds since the epoch."""


def _hidden(path: str) -> bool:
    """Under `_delta_log`, `_staged_commits` or any other `_`/`.` directory: never swept."""
    return any(part.startswith(("_", ".")) for part in path.split("/")[:-1])


def _sidecar_of(path: str) -> str | None:
    """`dir/part-1.parquet` for Hadoop's checksum sidecar `dir/.part-1.parquet.crc`."""
    head, _, name = path.rpartition("/")
    if not (name.startswith(".") and name.endswith(".parquet.crc")):
        return None
    return f"{head}/{name[1:-4]}" if head else name[1:-4]


def unlisted(stored: Iterable[StoredFile], referenced: Iterable[str]) -> list[str]:
    """Referenced files storage does not show: the paths are not what Ferry understood
    (or the table is damaged), so no stray file may be swept from this listing."""
    present = {f.path for f in stored}
    return sorted(p for p in referenced if p not in present)


def sweep(stored: Iterable[StoredFile], referenced: set[str], tombstones: set[str],
          vacuumed: set[str], now: float, retention_hours: int) -> list[StoredFile]:
    """Stray files to delete: data files (`*.parquet` outside `_`/`.` directories) no
    snapshot references, that are not tombstones (vacuum decides those by their deletion
    time), modified longer than `retention_hours` ago; and Hadoop `.crc` sidecars older
    than that whose data file is gone or goes now (`vacuumed`: tombstones vacuum deletes)."""
    cutoff = now - retention_hours * 3600
    found = list(stored)
    present = {f.path for f in found}
    gone = present - referenced - tombstones
    doomed: list[StoredFile] = []
    for file in found:
        if file.modified >= cutoff or _hidden(file.path):
            continue
        name = file.path.rpartition("/")[2]
        if name.endswith(".parquet") and not name.startswith(("_", ".")):
            if file.path in gone:
                doomed.append(file)
            continue
        owner = _sidecar_of(file.path)
        if owner is not None and (owner in gone or owner in vacuumed or owner not in present):
            doomed.append(file)
    return doomed


@dataclass(frozen=True)
class CompactedPartition:
    partition: str
    files_before: int
    files_after: int | None
    """None in a dry run."""


@dataclass(frozen=True)
class TableReport:
    """What maintenance did (or, in a dry run, would do) to one table."""

    table: str
    path: str
    present: bool = True
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    compacted: tuple[CompactedPartition, ...] = ()
    conflicts: tuple[str, ...] = ()
    """Partitions whose compaction lost to a concurrent change (schema): the next run
    compacts them; no row is affected."""
    vacuumed_files: int = 0
    """Files deleted: expired tombstones and stray files (`swept_files` of them)."""
    vacuumed_bytes: int = 0
    swept_files: int = 0
    retention_hours: int = DEFAULT_RETENTION_HOURS
    checkpointed: bool = False
    warnings: tuple[str, ...] = ()
    folded: tuple[FoldedPartition, ...] = ()
    """Flows whose settled offset-map entries were folded (the offset map only)."""
    fold_conflicts: tuple[str, ...] = ()
    """Flows whose fold lost to a concurrent writer: the next run folds them."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types only (lists, not tuples: Airflow's XCom would wrap tuples)."""
        return asdict(self) | {"compacted": [asdict(c) for c in self.compacted],
                               "conflicts": list(self.conflicts),
                               "folded": [asdict(f) for f in self.folded],
                               "fold_conflicts": list(self.fold_conflicts),
                               "warnings": list(self.warnings)}

    def text(self, dry_run: bool = False) -> str:
        if not self.present:
            return f"{self.path}: no table yet"
        would = "would " if dry_run else ""
        parts = [f"{self.path}: {self.files_before} files ({_size(self.bytes_before)})"]
        if not dry_run:
            parts[0] += f" -> {self.files_after} files ({_size(self.bytes_after)})"
        if self.folded:
            parts.append(f"{would}fold the settled offset-map entries of " + ", ".join(
                f"{f.partition} ({f.rows_before} -> {f.rows_after} rows)"
                for f in self.folded))
        if self.compacted:
            parts.append(f"{would}compact " + ", ".join(
                f"{c.partition} ({c.files_before}" +
                (f" -> {c.files_after})" if c.files_after is not None else " files)")
                for c in self.compacted))
        else:
            parts.append("nothing to compact")
        parts.append(f"vacuum {would}remove {self.vacuumed_files} files "
                     f"({_size(self.vacuumed_bytes)}) older than {self.retention_hours}h"
                     + (f", {self.swept_files} of them stray" if self.swept_files else ""))
        if self.conflicts:
            parts.append("compaction lost to a concurrent change, retried next run: "
                         + ", ".join(self.conflicts))
        if self.fold_conflicts:
            parts.append("folding lost to a concurrent writer, retried next run: "
                         + ", ".join(self.fold_conflicts))
        return "; ".join(parts) + "".join(f"\n  warning: {w}" for w in self.warnings)


@dataclass(frozen=True)
class MaintenanceReport:
    retention_hours: int
    dry_run: bool
    tables: tuple[TableReport, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"retention_hours": self.retention_hours, "dry_run": self.dry_run,
                "files_before": sum(t.files_before for t in self.tables),
                "files_after": sum(t.files_after for t in self.tables),
                "vacuumed_files": sum(t.vacuumed_files for t in self.tables),
                "vacuumed_bytes": sum(t.vacuumed_bytes for t in self.tables),
                "tables": [t.to_json() for t in self.tables]}

    def text(self) -> str:
        head = (f"retention {self.retention_hours}h" +
                (" (dry run: nothing changed)" if self.dry_run else ""))
        return "\n".join([head, *(t.text(self.dry_run) for t in self.tables)])


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    scaled = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GiB":
            break
    return f"{scaled:.1f} {unit}"

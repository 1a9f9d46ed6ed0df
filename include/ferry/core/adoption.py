"""Adopting another mirror's progress (pure): what is reported per partition, and the
decisions made from an alignment (`ferry.core.alignment`) — where Ferry continues, whether
the alignment can be trusted, what the records after the last pair are.

The statuses of a partition:

- `would-adopt` (dry run) / `adopted`: aligned; positions and entries (to be) written.
- `already-adopted`: an earlier adoption committed its position; left as it is.
- `no-remote-topic`: nothing on the target to adopt; the flow copies the partition as a
  new one.
- `nothing-copied`: no stored progress and an empty remote partition.
- `no-source-topic` / `no-source-partition`: the old mirror stored progress for a source
  partition that no longer exists; nothing to copy, left as it is.
- `partitions-differ`: the remote topic has another partition count than the source, so
  partition p was not mirrored to partition p (MirrorMaker 1's default handler lets the
  producer pick): not adopted.
- `not-aligned`: the alignment lost step (long runs of altered pairs, no pair at all while
  both sides hold records, or records the old mirror counts as copied that do not pair):
  not adopted; a larger window, or a check of what wrote the remote partition, is needed.
- `open-transaction`: a transaction is open on the source partition and the remote one
  holds records after the last pair: the old mirror read uncommitted records (MM1 and MM2
  both do) and may have copied some of it, which Ferry cannot see yet. Not adopted; adopt
  again once the transaction ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from ferry.core.alignment import ALTERED, EXTRA, MISSING, Finding


class AdoptStatus(StrEnum):
    """What adopt found, or did, for one partition (its value is what reports show)."""

    WOULD_ADOPT = "would-adopt"
    ADOPTED = "adopted"
    ALREADY = "already-adopted"
    NO_REMOTE = "no-remote-topic"
    NOTHING = "nothing-copied"
    NO_SOURCE = "no-source-topic"
    NO_SOURCE_PARTITION = "no-source-partition"
    PARTITIONS_DIFFER = "partitions-differ"
    NOT_ALIGNED = "not-aligned"
    OPEN_TRANSACTION = "open-transaction"


REFUSED = frozenset({AdoptStatus.PARTITIONS_DIFFER, AdoptStatus.NOT_ALIGNED,
                     AdoptStatus.OPEN_TRANSACTION})
"""Statuses that leave a partition neither adopted nor safe to copy as a new one."""
NO_PROGRESS = -1
"""`progress` of a partition the old mirror stored none for."""
FINDINGS_SHOWN = 50
"""Findings listed (and logged one by one) per partition; all are counted."""


@dataclass
class PartitionAdoption:
    """What adopting one source partition found and did."""

    topic: str
    partition: int
    remote: str
    progress: int
    """The old mirror's next source offset to copy, as it stored it (NO_PROGRESS: none)."""
    position: int = 0
    """Where Ferry continues copying."""
    source_start: int = 0
    source_end: int = 0
    target_start: int = 0
    target_end: int = 0
    matched: int = 0
    missing: int = 0
    doubled: int = 0
    extra: int = 0
    altered: int = 0
    after_progress: int = 0
    """Records the old mirror copied at or after its stored progress (after its last
    flush): adopted, so they are not copied again."""
    to_copy: int = 0
    """Source records from the position on: the next cycle copies them."""
    entries: int = 0
    status: AdoptStatus = AdoptStatus.WOULD_ADOPT
    reason: str = ""
    """Why the partition was not adopted (statuses in REFUSED)."""
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [asdict(f) for f in self.findings]
        return data

    def text(self) -> str:
        line = (f"  {self.topic}-{self.partition} -> {self.remote}-{self.partition}: "
                f"{self.status}")
        if self.reason:
            line += f": {self.reason}"
        if self.status not in (AdoptStatus.WOULD_ADOPT, AdoptStatus.ADOPTED,
                               AdoptStatus.NOT_ALIGNED):
            return line
        stored = "no progress stored" if self.progress == NO_PROGRESS \
            else f"old mirror at {self.progress}"
        line += (f"; {stored}, Ferry continues at {self.position}; "
                 f"{self.matched:,} records paired, {self.missing:,} missing, "
                 f"{self.doubled:,} doubled, {self.extra:,} extra, {self.altered:,} altered"
                 f"; {self.after_progress:,} copied after its last flush; "
                 f"{self.to_copy:,} left to copy ({self.seconds:.1f}s)")
        for f in self.findings:
            line += "\n    " + finding_text(f)
        return line


def finding_text(f: Finding) -> str:
    """`kind: N records, source a..b, target c..d` (inclusive offsets)."""
    source = f"source {f.source_start}..{(f.source_end or 0) - 1}" \
        if f.source_start is not None else ""
    target = f"target {f.target_start}..{(f.target_end or 0) - 1}" \
        if f.target_start is not None else ""
    return f"{f.kind}: {f.count:,} records, " + ", ".join(x for x in (source, target) if x)


@dataclass
class AdoptReport:
    flow: str
    old: str
    executed: bool
    run_id: str
    progress_from: str
    partitions: list[PartitionAdoption] = field(default_factory=list)

    @property
    def refused(self) -> list[PartitionAdoption]:
        return [p for p in self.partitions if p.status in REFUSED]

    def to_json(self) -> dict[str, Any]:
        return {"flow": self.flow, "from": self.old, "executed": self.executed,
                "run_id": self.run_id, "progress_from": self.progress_from,
                "ok": not self.refused,
                "partitions": [p.to_json() for p in self.partitions]}

    def text(self) -> str:
        lines = [f"flow {self.flow}: adopting {self.old.upper()}'s progress from "
                 f"{self.progress_from}" + ("" if self.executed else " (dry run)")]
        lines += [p.text() for p in self.partitions]
        if self.refused:
            lines.append(f"{len(self.refused)} partitions not adopted (see above): do not "
                         "run the flow before they are settled, or it copies them as new")
        return "\n".join(lines)


def moving(first: Mapping[tuple[str, int], int], second: Mapping[tuple[str, int], int]
           ) -> list[tuple[str, int]]:
    """Partitions whose stored progress differs between two reads."""
    return sorted(tp for tp in set(first) | set(second) if first.get(tp) != second.get(tp))


def position(last_paired: int | None, low: int, progress: int) -> int:
    """Where Ferry continues: one past the last source record with a copy on the target.
    With none paired: the source's log start, or the old mirror's progress when retention
    deleted records it never copied (the flow then reports that gap, never skips it)."""
    if last_paired is not None:
        return last_paired + 1
    return progress if NO_PROGRESS < progress < low else low


def not_aligned(matched: int, altered: int, source_records: int, target_records: int
                ) -> str:
    """Why an alignment cannot be trusted ("" when it can): pairs that differ beyond a
    trickle (1%, at least 100) mean the two sides fell out of step — a replay or a hole
    longer than the window, or partitions that were not mirrored p to p."""
    if matched == 0 and source_records and target_records:
        return ("no source record has a copy on the remote partition: it was not mirrored "
                "from this partition, or the copies are older than the source's log start")
    if altered > max(100, matched // 100):
        return (f"{altered:,} records differ between the two sides: the alignment lost step "
                "(a replay or a hole longer than --window, or records not mirrored "
                "partition to partition)")
    return ""


@dataclass(frozen=True)
class Tail:
    """The findings after the last pair, split: the source records there are copied by
    the next cycle (`to_copy`, some of them `missing`, some `altered` pairs whose target
    side becomes extra); the rest are reported as they are."""

    to_copy: int
    missing: int
    altered: int
    shown: list[Finding]
    unpaired_copies: int = 0
    """Target records after the last pair that are not doubles (altered and extra)."""
    counted: int = 0
    """Altered pairs whose source record the old mirror's progress counts as copied."""
    counted_from: int | None = None
    """The first source offset of those."""


def tail(findings: Iterable[Finding], progress: int = NO_PROGRESS) -> Tail:
    missing = altered = unpaired = counted = 0
    counted_from: int | None = None
    shown = []
    for f in findings:
        if f.kind == MISSING:
            missing += f.count
        elif f.kind == ALTERED:
            altered += f.count
            unpaired += f.count
            start = f.source_start or 0
            if start < progress:
                # (the count, where offsets have no gaps; fewer where they have)
                counted += min(f.count, progress - start)
                counted_from = start if counted_from is None else min(counted_from, start)
        else:
            unpaired += f.count if f.kind == EXTRA else 0
            shown.append(f)
    return Tail(missing + altered, missing, altered, shown, unpaired, counted, counted_from)


def lost_step(end: Tail, window: int) -> str:
    """Why the records after the last pair cannot be trusted ("" when they can): the old
    mirror's progress counts source records there as copied, and they do not pair with the
    target records there. Copying them again would double them: after a replay or a hole
    longer than the window, the two sides never pair again."""
    if not end.counted:
        return ""
    return (f"{end.counted:,} records the old mirror's progress counts as copied (from offset "
            f"{end.counted_from}) do not pair with the records after the last paired copy: "
            f"the alignment lost step (a replay or a hole longer than --window {window}: "
            "raise it), or the remote partition holds other records")


def open_transaction(source: str, remote: str, stable: int, end: int, unpaired: int) -> str:
    """Why a partition must wait ("" when it need not): a transaction open on the source
    (its last stable offset `stable` below its end) hides records Ferry reads only once
    committed, and `unpaired` records after the last pair on the remote partition are
    copies of records there (`any_shared`): the old mirror, reading uncommitted, copied
    some of that transaction, which pair only once it is committed."""
    if stable >= end or not unpaired:
        return ""
    return (f"{source} has a transaction open from offset {stable} (its end is {end}), and "
            f"{remote} holds {unpaired:,} records after the last one paired, among them "
            "copies of records of that transaction (the old mirror read uncommitted "
            "records): adopt again once it is committed or aborted")


def any_shared(few: Iterable[bytes], many: Iterable[bytes]) -> bool:
    """Whether a digest of `many` is among `few` (held in memory: pass the smaller side
    as `few`; `many` is read only up to the first one shared)."""
    held = set(few)
    return bool(held) and any(d in held for d in many)


def partition_check(partition: int, source_partitions: int | None,
                    remote_partitions: int | None, topic: str, remote: str
                    ) -> tuple[AdoptStatus, str]:
    """(status, reason) of a partition from the two topics' partition counts (None: no such
    topic); WOULD_ADOPT when both exist with the same count. Another count in either
    direction means records were not mirrored partition to partition (MM1's producer
    picked, or the source topic was recreated), so nothing there is adopted."""
    if source_partitions is None:
        return AdoptStatus.NO_SOURCE, ""
    if partition >= source_partitions:
        return AdoptStatus.NO_SOURCE_PARTITION, ""
    if remote_partitions is None:
        return AdoptStatus.NO_REMOTE, ""
    if remote_partitions != source_partitions:
        return AdoptStatus.PARTITIONS_DIFFER, (
            f"{remote} has {remote_partitions} partitions, {topic} {source_partitions}: "
            f"partition {partition} was not mirrored to partition {partition}")
    return AdoptStatus.WOULD_ADOPT, ""

"""Consumer-group checkpoints: exact translation through the offset map, MM2's wire format,
MM2's emit rule and group-offset sync decisions (pure).

Translation (design G5): a group committed at source offset C maps to the target offset of
the first mirrored record at or after C. When no mirrored record is at or after C, it maps
to the end of what was mirrored (never ahead of the target's data): *exact* while C is
within what the flow has covered (nothing between C and the covered end is a record to
copy), *bounded* when the group is ahead of the mirror (C past the covered end).

Wire format (MM2 `Checkpoint`, `<source>.checkpoints.internal` partition 0 on the target),
big-endian, STRING = int16 length + UTF-8: key `group, topic (downstream), partition:int32`;
value `version:int16=0, upstreamOffset:int64, offset:int64, metadata`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ferry.core.offsetmap import MapEntry, next_mirrored
from ferry.mm2.wire import Reader, string

VERSION = 0


class Translated(StrEnum):
    """How a group's source offset was translated to the target."""

    EXACT = "exact"
    """The offset of the record the group would read next, as mirrored."""
    BOUNDED = "bounded"
    """The group is ahead of the mirror: the end of what was mirrored, never past it."""
    NOT_MIRRORED = "not-mirrored"
    """Nothing of the partition is on the target yet: no offset."""


# Target group states in which Ferry may write offsets (nobody consumes there).
WRITABLE_STATES = frozenset({"EMPTY", "DEAD", "ABSENT"})


@dataclass(frozen=True, order=True)
class Checkpoint:
    group: str
    topic: str
    """The downstream (remote) topic."""
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        return self.group, self.topic, self.partition


def encode(checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    """(key, value) bytes exactly as MM2's `Checkpoint.recordKey()/recordValue()`."""
    key = (string(checkpoint.group) + string(checkpoint.topic)
           + struct.pack(">i", checkpoint.partition))
    value = (struct.pack(">hqq", VERSION, checkpoint.upstream_offset,
                         checkpoint.downstream_offset) + string(checkpoint.metadata))
    return key, value


def decode(key: bytes | None, value: bytes | None) -> Checkpoint | None:
    """A checkpoint record, or None for one that does not parse (MM2's readers skip
    those too)."""
    if key is None or value is None:
        return None
    try:
        k, v = Reader(key), Reader(value)
        group, topic = k.string(), k.string()
        (partition,) = k.take(">i")
        version, upstream, downstream = v.take(">hqq")
        metadata = v.string()
    except (ValueError, UnicodeDecodeError, struct.error):
        return None
    if version != VERSION:
        return None
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)


def translate(entries: Sequence[MapEntry], committed: int) -> tuple[int, Translated] | None:
    """(target offset, EXACT or BOUNDED) for a group committed at source offset
    `committed`, from one partition's offset-map entries in source order; None when
    nothing of the partition was mirrored yet."""
    targets = [s.target_end for e in entries for s in e.segments]
    ends = [e.target_end for e in entries if e.target_end is not None]
    if not targets:  # no record mirrored (an empty partition): where the remote one ends
        if not ends:
            return None
        return ends[-1], _exact_or_bounded(entries, committed)
    found = next_mirrored(entries, committed)
    if found is not None:
        return found[1], Translated.EXACT
    # past every mirrored record: past the last of them, or where an entry without records
    # (a source marker copied after them) saw the remote partition end, whichever is
    # later; the same whether every entry is read or only those ending after `committed`
    return max(targets + ends), _exact_or_bounded(entries, committed)


def _exact_or_bounded(entries: Sequence[MapEntry], committed: int) -> Translated:
    """EXACT when the group is within what was mirrored, else BOUNDED (it is ahead)."""
    return Translated.EXACT if committed <= entries[-1].covered_end else Translated.BOUNDED


def should_emit(new: Checkpoint, last: Checkpoint | None) -> bool:
    """MM2's rule: the first checkpoint of a group partition, a source group that rewound,
    or a downstream offset that advanced. Repeats and downstream-only regressions are
    suppressed, so checkpoints never move backwards unless the source group did."""
    return (last is None or new.upstream_offset < last.upstream_offset
            or new.downstream_offset > last.downstream_offset)


def latest(checkpoints: Iterable[Checkpoint]) -> dict[tuple[str, str, int], Checkpoint]:
    """The last checkpoint of each (group, topic, partition), in topic order."""
    found: dict[tuple[str, str, int], Checkpoint] = {}
    for checkpoint in checkpoints:
        found[checkpoint.key] = checkpoint
    return found


@dataclass(frozen=True)
class TargetGroup:
    """A consumer group as the target cluster sees it."""

    state: str
    """Kafka's group state (EMPTY, STABLE, ...), or ABSENT."""
    offsets: Mapping[tuple[str, int], int]


def offsets_to_commit(checkpoints: Iterable[Checkpoint], target: TargetGroup
                      ) -> dict[tuple[str, int], Checkpoint] | None:
    """Which translated offsets to commit into the group on the target: None when the
    group is active there (never touched); otherwise those that move it forward."""
    if target.state not in WRITABLE_STATES:
        return None
    return {(c.topic, c.partition): c for c in checkpoints
            if target.offsets.get((c.topic, c.partition), -1) < c.downstream_offset}


def translate_back(entries: Sequence[MapEntry], committed: int
                   ) -> tuple[int, Translated] | None:
    """Fail-back: (source offset, EXACT) for a group committed at `committed` on the
    *remote* partition, from the entries of the flow that filled it (source order): the
    source offset of the first mirrored record at or after `committed` on the target, or,
    past everything mirrored, the end of what the flow covered (the records after it never
    reached the target, so the group never read them). None when nothing was mirrored."""
    if not any(e.segments for e in entries):
        return None
    for entry in entries:
        for segment in entry.segments:
            if segment.target_end > committed:
                at = segment.source_start + max(0, committed - segment.target_start)
                return at, Translated.EXACT
    return entries[-1].covered_end, Translated.EXACT

"""Verification (pure): does every mirrored record on the target equal its source record?

The offset map pairs each mirrored source offset with its target offset. Each side's
record becomes a digest of its key, value, headers and timestamp; a pair whose digests
differ is *altered*, a pair whose target record is gone is *missing*. Source records that
retention already deleted cannot be checked and are counted apart.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ferry.core.offsetmap import MapEntry

ALTERED, MISSING = "altered", "missing"


def digest(key: bytes | None, value: bytes | None,
           headers: Sequence[tuple[str, bytes | None]] | None, timestamp_ms: int) -> bytes:
    """A digest of what a mirror must keep; null and empty stay distinct."""
    h = hashlib.sha256()

    def field(data: bytes | None) -> None:
        h.update(b"\x00" if data is None else b"\x01" + struct.pack(">I", len(data)) + data)

    field(key)
    field(value)
    for name, data in headers or ():
        field(name.encode())
        field(data)
    h.update(struct.pack(">q", timestamp_ms))
    return h.digest()


def pairs(entries: Iterable[MapEntry], low: int = 0) -> list[tuple[int, int]]:
    """(source offset, target offset) of every mirrored record at or after source `low`."""
    return [(s, seg.target_start + (s - seg.source_start))
            for entry in entries for seg in entry.segments
            for s in range(max(seg.source_start, low), seg.source_end)]


@dataclass(frozen=True)
class Mismatch:
    source_offset: int
    target_offset: int
    kind: str


def compare(paired: Sequence[tuple[int, int]], source: Mapping[int, bytes],
            target: Mapping[int, bytes]) -> tuple[int, list[Mismatch]]:
    """(records checked, mismatches) over `paired` offsets whose source record exists."""
    checked = 0
    found: list[Mismatch] = []
    for s, t in paired:
        if s not in source:
            continue  # deleted on the source since (retention): cannot be checked
        checked += 1
        if t not in target:
            found.append(Mismatch(s, t, MISSING))
        elif target[t] != source[s]:
            found.append(Mismatch(s, t, ALTERED))
    return checked, found

"""Positions written outside a copy (restored from the offset map, reset by an operator,
adopted from another mirror): what each write holds. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ferry.core.offsetmap import RESET_LANE, MapEntry


class Unread:
    """`PositionWrite.expect` when the caller did not read the position first."""

    def __repr__(self) -> str:
        return "UNREAD"


UNREAD = Unread()


@dataclass(frozen=True)
class PositionWrite:
    """One partition's position, written in one target transaction with `entries`, under
    the partition's writer id (taken before the position is read again).

    `expect`: the position the caller read before (None: none); when the position found
    after taking the writer id differs, nothing is written for the partition."""

    topic: str
    partition: int
    position: int
    target_end: int | None
    source_id: str = ""
    entries: Iterable[MapEntry] = ()
    """Read once, as they are written (an adoption's may be many)."""
    expect: int | Unread | None = UNREAD
    adopted: str = ""
    """The adoption's run id, for a position `ferry adopt` writes."""


@dataclass(frozen=True)
class PositionMoved:
    """A position that was not `expect` once the writer id was taken: left unwritten."""

    write: PositionWrite
    found: int | None
    owner: str


def reset_entry(flow: str, run_id: str, topic: str, partition: int, remote: str,
                position: int, target_end: int | None, committed_at_ms: int,
                source_id: str = "", target_id: str = "") -> MapEntry:
    """The offset-map entry of a reset: it covers no record and moves the position to
    `position`, so a position later restored from the offset map is the reset one, not
    the one before it."""
    return MapEntry(flow=flow, run_id=run_id, lane=RESET_LANE, source_topic=topic,
                    source_partition=partition, target_topic=remote,
                    target_partition=partition, covered_start=position,
                    covered_end=position, segments=(), committed_at_ms=committed_at_ms,
                    target_end=target_end, source_id=source_id, target_id=target_id)

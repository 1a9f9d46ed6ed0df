"""A position's commit metadata (its one encoder and one decoder, versioned), and positions
written outside a copy (restored from the offset map, reset by an operator, adopted from
another mirror): what each write holds. Pure."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from ferry.core.offsetmap import RESET_LANE, MapEntry
from ferry.errors import TerminalError

POSITION_FORMAT = 1
"""The commit-metadata format this Ferry writes (`ferry_format`); metadata without the key
was written before it was versioned and has the same fields as format 1."""


class PositionFormatError(TerminalError):
    """A position's metadata in a format this Ferry does not know (a newer Ferry's)."""


@dataclass(frozen=True)
class PositionMeta:
    """What a committed position records beside its offset."""

    target_end: int | None = None
    """The remote partition's end after what was recorded (at_least_once counts a crashed
    batch's duplicates from it)."""
    owner: str = ""
    """The transactional id that committed it (the next owner fences it before writing)."""
    source_id: str = ""
    """The source topic's ID (a recreated topic has another)."""
    adopted: str = ""
    """For a position `ferry adopt` wrote: the adoption's run id."""
    target_id: str = ""
    """The remote topic's ID ("" in positions of an older Ferry): a remote topic deleted
    and created again has another, and a position of the old one counts records the new
    one never got (`stale_for`)."""

    def stale_for(self, target_id: str) -> bool:
        """Whether the position was committed for another incarnation of the remote topic
        than `target_id` (its current ID; "" when unknown: never stale)."""
        return bool(self.target_id and target_id and self.target_id != target_id)


def encode_position(target_end: int | None, owner: str = "", source_id: str = "",
                    adopted: str = "", target_id: str = "") -> str:
    """The commit metadata of a position ("" when there is nothing to record)."""
    data: dict[str, object] = {}
    if target_end is not None:
        data["ferry_target_end"] = target_end
    if owner:
        data["ferry_owner"] = owner
    if source_id:
        data["ferry_source_id"] = source_id
    if adopted:
        data["ferry_adopted"] = adopted
    if target_id:
        data["ferry_target_id"] = target_id
    return json.dumps({"ferry_format": POSITION_FORMAT} | data) if data else ""


def decode_position(metadata: str | None) -> PositionMeta:
    """What a position's commit metadata records. Metadata that is not Ferry's JSON (empty,
    or written by another tool) records nothing; a newer format is refused, never guessed
    at."""
    try:
        data = json.loads(metadata or "{}")
    except ValueError:
        return PositionMeta()
    if not isinstance(data, dict):
        return PositionMeta()
    version = data.get("ferry_format", 1)
    if not isinstance(version, int) or version > POSITION_FORMAT:
        raise PositionFormatError(
            f"a committed position's metadata is in format {version!r}, newer than this "
            f"Ferry's ({POSITION_FORMAT}): a newer Ferry wrote it; upgrade Ferry to read it")

    def text(key: str) -> str:
        value = data.get(key)
        return value if isinstance(value, str) else ""

    end = data.get("ferry_target_end")
    return PositionMeta(end if isinstance(end, int) and not isinstance(end, bool) else None,
                        text("ferry_owner"), text("ferry_source_id"), text("ferry_adopted"),
                        text("ferry_target_id"))


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
    target_id: str = ""
    """The remote topic's ID the position is written for ("" unknown)."""


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

"""What one librdkafka call or one Kafka request may carry, and the cutting into pieces
that fit (adapter)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

PER_CALL = 1_000
"""Partitions (or other requests) per librdkafka read at most. librdkafka's time for one
ListOffsets or OffsetFetch grows with the square of its partitions, in CPU (10,000 in one
call: about 1 s; in calls of 1,000: about 0.15 s)."""

POSITIONS_PER_COMMIT = 1_000
"""Positions per offset commit at most. The group coordinator writes one commit as one
record batch to `__consumer_offsets`, refused whole above 1 MB (its max.message.bytes):
about 4,500 of Ferry's positions, fewer with long topic names. A transaction sends its
positions in several such commits, and commits them all at once."""


def chunks(items: list[T], size: int) -> Iterator[list[T]]:
    """`items` in consecutive lists of at most `size`."""
    for start in range(0, len(items), size):
        yield items[start:start + size]

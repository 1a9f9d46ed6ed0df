"""Lanes: a stable spread of source partitions over a fixed number of copy tasks.

A partition's lane is `(partition + h(topic)) mod lanes`, with `h` a stable hash of the
topic name. Partitions of one topic go round-robin (balanced), adding partitions or topics
never moves an existing partition, and each lane keeps one `transactional.id`, so the
producer that fences a zombie is always the one that owns the partition.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from ferry.planner import Range

DEFAULT_LANES = 2


def lane_count(tasks_max: int | None, cores: int, partitions: int) -> int:
    """`tasks.max` when set, else one lane per core, never more lanes than partitions."""
    wanted = tasks_max if tasks_max is not None else max(cores, 1)
    return max(1, min(wanted, partitions)) if partitions else max(1, wanted)


def lane_of(topic: str, partition: int, lanes: int) -> int:
    return (partition + zlib.crc32(topic.encode())) % lanes


def assign(ranges: Iterable[Range], lanes: int) -> dict[int, list[Range]]:
    """The ranges of each lane (lanes with nothing to do are absent), in offset order."""
    result: dict[int, list[Range]] = {}
    for r in sorted(ranges):
        result.setdefault(lane_of(r.topic, r.partition, lanes), []).append(r)
    return result

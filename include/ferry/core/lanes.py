"""Lanes: a stable spread of source partitions over a fixed number of copy tasks.

A partition's lane is `(partition + h(topic)) mod lanes`, with `h` a stable hash of the
topic name. Partitions of one topic go round-robin (balanced), adding partitions or topics
never moves an existing partition, and each lane keeps one `transactional.id`, so the
producer that fences a zombie is always the one that owns the partition.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable

from ferry.core.planner import Range

DEFAULT_LANES = 2


def cores_of(master: str) -> int:
    """Cores a Spark master offers Ferry's lanes: `local[N]` -> N, `local[*]`/`local` -> this
    machine's; a cluster master's size is unknown here -> DEFAULT_LANES (set tasks.max)."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return DEFAULT_LANES
    count = match.group(1)
    return int(count) if count and count != "*" else (os.cpu_count() or DEFAULT_LANES)


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

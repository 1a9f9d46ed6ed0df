"""Writers and lanes: who may write a remote partition, and how the work is spread.

A **writer** is the identity that commits a remote partition's records, offset-map entries
and position: one `transactional.id` per writer slot. A partition's slot is
`(partition + h(topic)) mod writers`, with `h` a stable hash of the topic name and `writers`
the flow's `ferry.writers`, fixed for the flow's life. It depends on nothing else: not the
lane count, the cores, the master, nor who starts the run (a schedule, `ferry mirror`, a
backfill into the flow's topic, failover's catch-up). So two runs that would write one
partition at once hold the same id, and the second one's `init_transactions` fences the
first: Kafka, not a check of ours, keeps one writer per partition (G11).

A **lane** is one Spark task of a run: it runs the writers of the slots it is given
(`lanes_of`). The lane count follows `tasks.max` or the cores and may differ from run to
run; it never exceeds the writer count.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable

from ferry.core.planner import Range

DEFAULT_LANES = 2
DEFAULT_WRITERS = 8


def cores_of(master: str) -> int:
    """Cores a Spark master offers Ferry's lanes: `local[N]` -> N, `local[*]`/`local` -> this
    machine's; a cluster master's size is unknown here -> DEFAULT_LANES (set tasks.max)."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return DEFAULT_LANES
    count = match.group(1)
    return int(count) if count and count != "*" else (os.cpu_count() or DEFAULT_LANES)


def lane_count(tasks_max: int | None, cores: int, partitions: int,
               writers: int = DEFAULT_WRITERS) -> int:
    """`tasks.max` when set, else one lane per core; never more lanes than partitions or
    writer slots (a lane runs whole slots)."""
    wanted = min(tasks_max if tasks_max is not None else max(cores, 1), max(writers, 1))
    return max(1, min(wanted, partitions)) if partitions else max(1, wanted)


def writer_of(topic: str, partition: int, writers: int) -> int:
    """The writer slot of a source partition (and of its remote partition)."""
    return (partition + zlib.crc32(topic.encode())) % writers


def by_writer(ranges: Iterable[Range], writers: int) -> dict[int, list[Range]]:
    """The ranges of each writer slot (slots with nothing to do are absent), in offset
    order."""
    result: dict[int, list[Range]] = {}
    for r in sorted(ranges):
        result.setdefault(writer_of(r.topic, r.partition, writers), []).append(r)
    return result


def lanes_of(slots: Iterable[int], lanes: int) -> list[list[int]]:
    """The writer slots each lane runs: slot `s` on lane `s mod lanes`; lanes with no slot
    are left out."""
    spread: dict[int, list[int]] = {}
    for slot in sorted(set(slots)):
        spread.setdefault(slot % max(lanes, 1), []).append(slot)
    return [spread[lane] for lane in sorted(spread)]

"""Names of what Ferry keeps on the target cluster, derived from the flow and its policy.

All of them are internal by MM2's rules (`*.internal`, `__*`), so no MM2 or Ferry flow
ever mirrors them, and the default group filter never syncs the positions group.
"""

from __future__ import annotations

from ferry.config import Flow


def offset_map_topic(flow: Flow) -> str:
    """The target topic holding one offset-map entry per transaction and source partition."""
    sep = flow.policy.separator if flow.policy.internal_separator_enabled else "."
    return f"ferry-offset-map{sep}{flow.source}{sep}internal"


def positions_group(flow: Flow) -> str:
    """The target consumer group whose committed offsets (on the remote topics) are the
    next source offsets to copy; committed in the same transactions as the records."""
    return f"__ferry-positions.{flow.source}"


def reader_group(flow: Flow, role: str) -> str:
    """The group id of a Ferry consumer that never joins or commits (librdkafka insists on
    one, and looks up its coordinator, so the principal needs DESCRIBE on it): the
    source reader of the lanes (`reader`), the offset-map reader on the target
    (`map-reader`). One prefix, `__ferry-positions.<source>.`, to grant."""
    return f"{positions_group(flow)}.{role}"


def transactional_id(flow: Flow, lane: int, lanes: int, role: str = "") -> str:
    """Stable per flow, lane and lane count, so a restarted lane fences its zombie. The
    count is part of the id: when it changes (tasks.max, cores, partitions), a partition
    that moves to another lane is written under an id no lane of the new count uses, and
    the lane that takes it over fences the old id first (`ferry.kafka.lane`; the owner is
    recorded with each position). A backfill's lanes (`role="backfill"`) have their own
    ids; the same owner fencing keeps a backfill and a scheduled run from both committing
    a partition."""
    kind = f"{role}." if role else ""
    return f"ferry.{flow.source}->{flow.target}.{kind}lane-{lane}-of-{lanes}"

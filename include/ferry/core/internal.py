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


def run_group(flow: Flow, role: str = "") -> str:
    """The group whose one committed offset names the flow's newest run of `role` (its
    metadata; `ferry.core.takeover`): a group nobody joins, under the positions group's
    prefix."""
    kind = f"{role}." if role else ""
    return f"{positions_group(flow)}.{kind}newest-run"


def claim_group(flow: Flow, txn_id: str) -> str:
    """The group whose one static member is the writer holding slot `txn_id` of a target
    without transactions (`ferry.kafka.claim`); under the positions group's prefix."""
    return f"{positions_group(flow)}.claim.{txn_id}"


def transactional_id(flow: Flow, writer: int, role: str = "") -> str:
    """The transactional id of writer slot `writer` (`ferry.core.lanes.writer_of`): a
    function of the flow and the partition alone, never of the lane count, the cores or who
    runs it, so every writer of a remote partition (a scheduled cycle, `ferry mirror`, a
    backfill into the flow's topic, failover's catch-up, adopt) holds the same id and the
    newest one's `init_transactions` fences the others. A backfill into a topic of its own
    (`role="backfill"`), which no flow writes, has ids of its own."""
    kind = f"{role}." if role else ""
    return f"ferry.{flow.source}->{flow.target}.{kind}writer-{writer}-of-{flow.ferry.writers}"

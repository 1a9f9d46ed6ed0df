"""Read Ferry's offset-map topic on the target (adapter): committed entries only, and the
topic's ID and end (where the Delta offset map stands in it: `ferry.state.mapcursor`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from ferry.config import Flow
from ferry.core.internal import offset_map_topic, reader_group
from ferry.core.offsetmap import MapEntry, decode
from ferry.kafka.admin import Admin
from ferry.kafka.records import scan

log = logging.getLogger(__name__)


def read_entries(flow: Flow, after: int = -1, timeout: float = 60.0
                 ) -> Iterator[tuple[int, MapEntry]]:
    """(topic offset, entry) for every committed entry of `flow` after topic offset
    `after`, up to the topic's current last stable offset (none before the flow's first
    sync created the topic)."""
    records = scan(flow.target_admin, offset_map_topic(flow), 0, after + 1,
                   reader_group(flow, "map-reader"), missing_ok=True, timeout=timeout)
    for msg in records:
        offset, value = msg.offset(), msg.value()
        if offset is None or value is None:
            continue
        try:
            entry = decode(value)
        except (ValueError, KeyError) as exc:
            log.warning("skipping unreadable offset-map record at %s: %s", offset, exc,
                        extra={"flow": flow.name})
            continue
        if entry.flow == flow.name:
            yield offset, entry


def map_topic_facts(flow: Flow, target: Admin) -> tuple[str, Callable[[], int]]:
    """The offset-map topic's ID ("" when it does not exist) and a call reading its end:
    what `ferry.state.mapcursor.map_cursor` needs of Kafka."""
    from ferry.core.planner import TopicPartition
    from ferry.kafka.identity import topic_ids

    topic = offset_map_topic(flow)
    tp = TopicPartition(topic, 0)
    return topic_ids(target, [topic]).get(topic, ""), lambda: target.watermarks([tp])[tp].high


STABLE_WAIT_S = 10.0
"""How long a job waits for the entries it just committed to become readable
(`wait_stable`): far beyond a marker's usual milliseconds, far below a transaction left
open by a writer that died (held until its `transaction.timeout.ms`)."""


def wait_stable(flow: Flow, within: float = STABLE_WAIT_S) -> tuple[int, int]:
    """Wait until every entry written to the offset-map topic before this call is readable
    read_committed: its last stable offset at the high watermark as it is now. A commit
    returns before its markers reach the topic, and a transaction of another writer
    (another flow's lane, a retried job's) opened before the entries holds them back
    until it ends. About `within` s at most: each look-up waits out transient states for
    at most that too. Transactions opened after the call do not hold it up. (last stable
    offset, high watermark) as last read: equal once everything was readable."""
    from ferry.core.planner import TopicPartition

    tp = TopicPartition(offset_map_topic(flow), 0)
    deadline = time.monotonic() + within
    bounded = Admin(flow.target_admin, timeout=max(1.0, within), retry_seconds=within)
    written = bounded.ends([tp])[tp]
    stable = bounded.last_stable([tp])[tp]
    while stable < written and time.monotonic() < deadline:
        time.sleep(0.05)
        stable = bounded.last_stable([tp])[tp]
    return stable, written

"""Read Ferry's offset-map topic on the target (adapter): committed entries only, and the
topic's ID and end (where the Delta offset map stands in it: `ferry.state.mapcursor`)."""

from __future__ import annotations

import logging
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

"""Read Ferry's offset-map topic on the target (adapter): committed entries only, and
where the Delta offset map stands in the topic's current incarnation (`map_cursor`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from ferry.config import Flow
from ferry.core.internal import offset_map_topic, reader_group
from ferry.core.offsetmap import MapEntry, decode
from ferry.core.tables import StatePaths
from ferry.kafka.admin import Admin
from ferry.kafka.records import scan
from ferry.state.reader import max_map_offset

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


@dataclass(frozen=True)
class MapCursor:
    """Where the Delta offset map stands against the offset-map topic on the target."""

    topic_id: str
    """The offset-map topic's ID ("" when it does not exist yet)."""
    after: int
    """The last offset of that topic the Delta table holds (-1: none): read on from here."""
    legacy_current: bool
    """Rows an older Ferry wrote without the topic's ID belong to this topic."""


def map_cursor(flow: Flow, target: Admin) -> MapCursor:
    """The Delta table's position in the current offset-map topic. Rows read from a topic
    that has been deleted and created again (another ID) do not count: the new topic is
    read from its start, and the change is logged as an incident (G10)."""
    from ferry.core.internal import offset_map_topic
    from ferry.core.planner import TopicPartition
    from ferry.kafka.identity import topic_ids

    topic = offset_map_topic(flow)
    path = StatePaths(flow.ferry.state_dir).offset_map
    topic_id = topic_ids(target, [topic]).get(topic, "")
    if not topic_id:
        return MapCursor("", -1, False)
    current = max_map_offset(path, flow.name, topic_id)
    legacy = max_map_offset(path, flow.name, "")
    legacy_current = legacy >= 0 and (current >= 0 or legacy < target.watermarks(
        [TopicPartition(topic, 0)])[TopicPartition(topic, 0)].high)
    after = max(current, legacy) if legacy_current else current
    if after < 0 and max_map_offset(path, flow.name) >= 0:
        from ferry.state import incidents

        log.error("incident: the offset-map topic %s on %s was deleted and created again "
                  "(now ID %s): the Delta offset map keeps every entry recorded before; the "
                  "new topic is read from its start", topic, flow.target, topic_id,
                  extra={"flow": flow.name})
        incidents.record(flow, [incidents.Incident(incidents.OFFSET_MAP_RECREATED, topic, 0,
                                                   f"now topic ID {topic_id}")])
    return MapCursor(topic_id, after, legacy_current)

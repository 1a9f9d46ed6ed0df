"""Where the Delta offset map stands in the offset-map topic's current incarnation (Delta
adapter). The Kafka facts (the topic's ID and end) come from the caller, so this layer reads
no Kafka itself."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ferry.config import Flow
from ferry.core.internal import offset_map_topic
from ferry.core.offsetmap import MapCursor
from ferry.core.tables import StatePaths
from ferry.state.reader import max_map_offsets

log = logging.getLogger(__name__)


def map_cursor(flow: Flow, topic_id: str, topic_end: Callable[[], int]) -> MapCursor:
    """The Delta table's position in the offset-map topic whose ID is `topic_id` (""
    when the topic does not exist); `topic_end()` gives its end (read only when rows of an
    older Ferry, recorded without a topic ID, must be placed). Rows read from a topic that
    has been deleted and created again (another ID) do not count: the new topic is read
    from its start, and the change is logged as an incident (G10)."""
    if not topic_id:
        return MapCursor("", -1, False)
    topic = offset_map_topic(flow)
    path = StatePaths(flow.ferry.state_dir).offset_map
    recorded = max_map_offsets(path, flow.name)  # one read for the three questions
    current, legacy = recorded.get(topic_id, -1), recorded.get("", -1)
    legacy_current = legacy >= 0 and (current >= 0 or legacy < topic_end())
    after = max(current, legacy) if legacy_current else current
    if after < 0 and recorded:
        from ferry.core import incidents
        from ferry.state.store import DeltaStore

        log.error("incident: the offset-map topic %s on %s was deleted and created again "
                  "(now ID %s): the Delta offset map keeps every entry recorded before; the "
                  "new topic is read from its start", topic, flow.target, topic_id,
                  extra={"flow": flow.name})
        incidents.record(DeltaStore.of(flow), flow.name, [incidents.Incident(
            incidents.OFFSET_MAP_RECREATED, topic, 0, f"now topic ID {topic_id}")])
    return MapCursor(topic_id, after, legacy_current)

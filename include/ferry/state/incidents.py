"""Incidents (G9, G10): what Kafka or an operator did that the copy had to meet, recorded in
the Delta `incidents` table (delta-rs, no JVM) and logged, like a gap: named, never silent.

- `source-recreated`: a source topic was deleted and created again; the run stops.
- `offset-map-recreated`: the target's offset-map topic was; it is read from its start.
- `position-restored`: Kafka expired a flow's position; it was taken from the offset map.

The same incident met again by later runs (the same kind, partition and detail) is
recorded once. Recording never fails the work: a miss is logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from ferry.config import Flow
from ferry.errors import FerryError

log = logging.getLogger(__name__)

SOURCE_RECREATED = "source-recreated"
OFFSET_MAP_RECREATED = "offset-map-recreated"
POSITION_RESTORED = "position-restored"


@dataclass(frozen=True)
class Incident:
    kind: str
    topic: str
    partition: int
    """-1 when the incident is about a whole topic."""
    detail: str


def record(flow: Flow, incidents: list[Incident], run_id: str = "") -> None:
    """Append the incidents not recorded yet."""
    from ferry.core.tables import INCIDENTS_DDL, StatePaths, incident_row
    from ferry.state.reader import rows
    from ferry.state.writer import append

    if not incidents:
        return
    path = StatePaths(flow.ferry.state_dir).incidents
    try:
        known = {(r["kind"], r["topic"], r["partition"], r["detail"])
                 for r in rows(path, flow.name)}
        now = datetime.now(UTC)
        append(path, INCIDENTS_DDL, [
            incident_row(flow.name, run_id, i.kind, i.topic, i.partition, i.detail, now)
            for i in dict.fromkeys(incidents)
            if (i.kind, i.topic, i.partition, i.detail) not in known])
    except (FerryError, OSError, ValueError) as exc:
        log.error("incidents not recorded (%s): %s", exc, incidents, extra={"flow": flow.name})

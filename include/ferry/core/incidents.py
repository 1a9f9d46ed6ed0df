"""Incidents (G9, G10): what Kafka or an operator did that the copy had to meet, recorded in
the `incidents` table and logged, like a gap: named, never silent.

- `source-recreated`: a source topic was deleted and created again; the run stops.
- `remote-recreated`: a remote topic was deleted and created again while positions of the
  old one were still committed; those are not resumed from, the partition is mirrored
  into the new topic again.
- `offset-map-recreated`: the target's offset-map topic was; it is read from its start.
- `position-restored`: Kafka expired a flow's position; it was taken from the offset map.

The same incident met again by later runs (the same kind, partition and detail) is
recorded once. Recording never fails the work: a miss is logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from ferry.errors import FerryError

log = logging.getLogger(__name__)

SOURCE_RECREATED = "source-recreated"
REMOTE_RECREATED = "remote-recreated"
OFFSET_MAP_RECREATED = "offset-map-recreated"
POSITION_RESTORED = "position-restored"


@dataclass(frozen=True)
class Incident:
    kind: str
    topic: str
    partition: int
    """-1 when the incident is about a whole topic."""
    detail: str


class IncidentTable(Protocol):
    """Where incidents are kept: the state store (`ferry.steps.ports.StateStore`)."""

    def rows(self, table: str, flow: str, **equal: object) -> list[dict[str, Any]]: ...

    def append(self, table: str, rows: list[dict[str, Any]]) -> None: ...


def unrecorded(incidents: list[Incident], recorded: list[dict[str, Any]]) -> list[Incident]:
    """`incidents` not among the `recorded` rows, each once, in order."""
    known = {(r["kind"], r["topic"], r["partition"], r["detail"]) for r in recorded}
    return [i for i in dict.fromkeys(incidents)
            if (i.kind, i.topic, i.partition, i.detail) not in known]


def record(store: IncidentTable, flow: str, incidents: list[Incident],
           run_id: str = "") -> None:
    """Append the incidents not recorded yet; a failure to record is logged, not raised."""
    from ferry.core.tables import incident_row

    if not incidents:
        return
    try:
        now = datetime.now(UTC)
        store.append("incidents", [
            incident_row(flow, run_id, i.kind, i.topic, i.partition, i.detail, now)
            for i in unrecorded(incidents, store.rows("incidents", flow))])
    except (FerryError, OSError, ValueError) as exc:
        log.error("incidents not recorded (%s): %s", exc, incidents, extra={"flow": flow})

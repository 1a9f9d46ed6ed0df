"""The state-store port on Delta (`ferry.steps.ports.StateStore`): the steps read and append
a flow's tables by name, and this maps each name to its Delta table under the state dir
and its schema (`ferry.core.tables.SCHEMAS`), through delta-rs (`reader`, `writer`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ferry.config import Flow
from ferry.core.offsetmap import MapWindow
from ferry.core.planner import Gap
from ferry.core.tables import JOB_TABLES, SCHEMAS, MapRow, StatePaths
from ferry.state import reader, writer


@dataclass(frozen=True)
class DeltaStore:
    """The Delta tables under `root` (a flow's `ferry.state.dir`)."""

    root: str

    @classmethod
    def of(cls, flow: Flow) -> DeltaStore:
        return cls(flow.ferry.state_dir)

    def _path(self, table: str) -> str:
        if table not in SCHEMAS:
            raise ValueError(f"no state table {table!r} (known: {', '.join(SCHEMAS)})")
        return StatePaths(self.root).table(table)

    def rows(self, table: str, flow: str, **equal: object) -> list[dict[str, Any]]:
        return reader.rows(self._path(table), flow, **equal)

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Refused for the copy job's tables (`JOB_TABLES`): each table has one writer."""
        if table in JOB_TABLES:
            raise ValueError(f"the {table} table is the copy job's to write, no one else's")
        writer.append(self._path(table), SCHEMAS[table], rows)

    def last_steps(self, flow: str) -> dict[str, datetime]:
        return reader.last_steps(self._path("syncs"), flow)

    def unrecorded_gaps(self, flow: str, gaps: Sequence[Gap]) -> list[Gap]:
        return reader.unrecorded_gaps(self._path("gaps"), flow, gaps)

    def map_rows(self, flow: str, topics: Collection[str] | None = None,
                 windows: Collection[MapWindow] | None = None) -> list[MapRow]:
        return reader.map_rows(self._path("offset_map"), flow, topics, windows)

"""The plan file: the copy job's only input, and its one owner.

A cycle (`ferry mirror`, the DAG's `plan` task) and each backfill chunk write one; the
copy job reads it. It holds no secrets: the job loads the flow's config itself. Every
file carries `version`; a reader refuses a version it does not know (a file written by
another Ferry), rather than guess at its fields. Extra keys (what `ferry plan --json`
adds for people: partitions, topology) are ignored by the reader. Pure, apart from
`write`/`read`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ferry.core.planner import Gap, Range
from ferry.core.takeover import Named
from ferry.errors import TerminalError

VERSION = 1
"""The format this Ferry writes and reads. Raise it when a field changes meaning."""


class PlanFileError(TerminalError):
    """A plan file this Ferry cannot read: another version, or not a plan at all."""


@dataclass(frozen=True)
class PlanFile:
    flow: str
    run_id: str
    lanes: int
    """The flow's lane count: lane ids and transactional ids derive from it (G11)."""
    ranges: tuple[Range, ...]
    gaps: tuple[Gap, ...] = ()
    role: str = ""
    """"" for the flow's own lanes; a backfill into a topic of its own copies as a role."""
    planned_at: str = ""
    label: str = ""
    """What the UI shows for a backfill chunk."""
    owner: Named | None = None
    """The continuous run this cycle is one of, as its lanes name it the flow's newest
    (`ferry.core.takeover`); None: the cycle is a run of its own (named by `run_id`)."""
    topics: tuple[str, ...] = ()
    """The flow's source topics planned, idle ones too (a continuous loop's kept clients
    learn them all when made: `ferry.kafka.kept`); () when not known (a backfill chunk, a
    plan file of an earlier release)."""

    def to_json(self) -> dict[str, Any]:
        data = {"version": VERSION, "flow": self.flow, "run_id": self.run_id,
                "planned_at": self.planned_at, "role": self.role, "label": self.label,
                "lanes": self.lanes, "ranges": [asdict(r) for r in self.ranges],
                "gaps": [asdict(g) | {"count": g.count} for g in self.gaps]}
        if self.owner is not None:
            data["owner"] = asdict(self.owner)
        if self.topics:
            data["topics"] = list(self.topics)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "the plan") -> PlanFile:
        """The plan in `data`; `PlanFileError` naming `source` for another version or a
        missing field."""
        version = data.get("version") if isinstance(data, dict) else None
        if version != VERSION:
            raise PlanFileError(
                f"{source}: plan file version {version!r} is not the one this Ferry reads "
                f"({VERSION}): plan the run again with this Ferry (ferry plan / the DAG's "
                "plan task), or run the copy with the Ferry that planned it")
        try:
            range_keys = {f.name for f in fields(Range)}
            gap_keys = {f.name for f in fields(Gap)}
            return cls(
                flow=data["flow"], run_id=data["run_id"], lanes=int(data["lanes"]),
                ranges=tuple(Range(**{k: v for k, v in r.items() if k in range_keys})
                             for r in data["ranges"]),
                gaps=tuple(Gap(**{k: v for k, v in g.items() if k in gap_keys})
                           for g in data["gaps"]),
                role=data.get("role", ""), planned_at=data.get("planned_at", ""),
                label=data.get("label", ""), owner=_owner(data.get("owner")),
                topics=tuple(str(t) for t in data.get("topics", ())))
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanFileError(f"{source}: not a Ferry plan file ({exc!r})") from None


def _owner(data: Any) -> Named | None:
    if data is None:
        return None
    since = data["since_ms"]
    return Named(str(data["run"]), None if since is None else int(since))


def write(path: Path, plan: PlanFile, extra: dict[str, Any] | None = None) -> str:
    """Write `plan` (plus `extra` keys for people) to `path`; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_json() | (extra or {}), indent=2))
    return str(path)


def read(path: str | Path) -> PlanFile:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise PlanFileError(f"plan file {path}: cannot be read ({exc})") from None
    return PlanFile.from_json(data, f"plan file {path}")

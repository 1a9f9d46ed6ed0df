"""Failover as one operation (pure decisions): which translated group offsets go into
which target groups, and what data is at risk when the source is gone.

A group partition's line says where the group committed on the source, where that is on
the target, how exact (`exact`, `bounded`: ahead of the mirror, placed at its end,
`not-mirrored`), and what happened to it on the target: committed, already there or
ahead (a target group only moves forward), or left alone because consumers are active
in that group on the target.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from ferry.core.checkpoints import Checkpoint, TargetGroup, offsets_to_commit


class GroupOutcome(StrEnum):
    """What a failover did, or would do, with one group partition's offset on the target."""

    COMMITTED = "committed"
    CURRENT = "already-there"
    ACTIVE = "group-active-on-target"
    """Not written: the group has members on the target (it consumes there already)."""
    NOTHING = "nothing-mirrored"
    DRY_RUN = "would-commit"



@dataclass(frozen=True)
class GroupLine:
    group: str
    topic: str
    partition: int
    source_offset: int
    target_topic: str
    target_offset: int | None
    status: str
    """exact, bounded or not-mirrored (`ferry.core.checkpoints`)."""
    outcome: GroupOutcome
    """committed, would-commit (dry run), already-there, group-active-on-target or
    nothing-mirrored."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        target = ("-" if self.target_offset is None
                  else f"{self.target_topic}-{self.partition}@{self.target_offset}")
        return (f"{self.group}: {self.topic}-{self.partition}@{self.source_offset} -> "
                f"{target} {self.status}, {self.outcome}")


@dataclass(frozen=True)
class AtRisk:
    """A source partition's data that never reached the target, as of the last run."""

    topic: str
    partition: int
    records: int
    seconds: float
    as_of: datetime

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "records": self.records,
                "seconds": self.seconds, "as_of": self.as_of.isoformat()}


def group_filter(pattern: str | None) -> re.Pattern[str] | None:
    """`--groups REGEX` (matched against the whole group id); None for every group."""
    return None if pattern is None else re.compile(pattern)


def plan_commits(checkpoints: Sequence[Checkpoint],
                 states: Mapping[str, TargetGroup]
                 ) -> dict[tuple[str, str, int], GroupOutcome]:
    """(group, target topic, partition) -> outcome, for translated `checkpoints` and the
    target groups' `states`: what a failover commits, by the same rule as group offset
    sync (only into groups nobody consumes, only forward)."""
    by_group: dict[str, list[Checkpoint]] = {}
    for checkpoint in checkpoints:
        by_group.setdefault(checkpoint.group, []).append(checkpoint)
    outcomes: dict[tuple[str, str, int], GroupOutcome] = {}
    for group, mine in by_group.items():
        writes = offsets_to_commit(mine, states[group])
        for c in mine:
            if writes is None:
                outcomes[c.key] = GroupOutcome.ACTIVE
            else:
                written = (c.topic, c.partition) in writes
                outcomes[c.key] = GroupOutcome.COMMITTED if written else GroupOutcome.CURRENT
    return outcomes


def latest_rows(rows: Iterable[Mapping[str, Any]], key: Sequence[str],
                when: str) -> list[Mapping[str, Any]]:
    """The newest row (by `when`) for each `key`, in key order."""
    newest: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        k = tuple(row[name] for name in key)
        if k not in newest or row[when] >= newest[k][when]:
            newest[k] = row
    return [newest[k] for k in sorted(newest)]


def at_risk(lag_rows: Iterable[Mapping[str, Any]]) -> list[AtRisk]:
    """Per source partition, what the last recorded run left unmirrored (its lag)."""
    return [AtRisk(r["topic"], r["partition"], int(r["lag_records"] or 0),
                   float(r["lag_seconds"] or 0.0), r["recorded_at"])
            for r in latest_rows(lag_rows, ("topic", "partition"), "recorded_at")]

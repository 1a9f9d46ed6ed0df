"""When each sync step runs: MM2's intervals, read for batch runs.

Steps: `topics` (remote topics and partitions; `refresh.topics.*`), `configs`
(`sync.topic.configs.*`), `acls` (`sync.topic.acls.*`).

- A step that is off never runs, except `topics` before its first sync: MM2 creates the
  remote topics when it starts even with refresh off.
- An interval set in the config is honoured: the step runs when its last sync is at least
  that old. Left at MM2's default, the step runs every run (a run is a fresh look; the
  default 600 s would hide a new topic for ten minutes).
- `force` (the `ferry sync` command) runs every step that is on, whatever the interval.
- A long-running loop (continuous mode) paces the costly steps in-process (`Pace`): each
  runs at its interval, set or default, as in a long-running MM2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ferry.config import Flow, Interval

STEPS = ("topics", "configs", "acls")
DUE = "due"

LAG_HISTORY = Interval(True, 60, explicit=True)
"""A point of the lag history (the Ferry page's chart, a Delta commit) at most once a
minute in a long-running loop, as a one-minute schedule gives: not one per cycle of a
few seconds, which would fill the `lag` table with thousands of commits an hour."""


def _interval(flow: Flow, step: str) -> tuple[Interval, str]:
    return {
        "topics": (flow.refresh_topics, "refresh.topics"),
        "configs": (flow.sync_topic_configs, "sync.topic.configs"),
        "acls": (flow.sync_topic_acls, "sync.topic.acls"),
        "checkpoints": (flow.emit_checkpoints, "emit.checkpoints"),
        "heartbeats": (flow.emit_heartbeats, "emit.heartbeats"),
        "lag": (LAG_HISTORY, "the lag history"),
    }[step]


def interval_of(flow: Flow, step: str) -> Interval:
    """The interval of a sync step, `checkpoints`, `heartbeats` (MM2's keys) or `lag`."""
    return _interval(flow, step)[0]


def due_steps(flow: Flow, last: Mapping[str, datetime], now: datetime,
              force: bool = False, steps: tuple[str, ...] = STEPS) -> dict[str, str]:
    """Each step -> `DUE`, or why it does not run now. `last` holds each step's last
    applied sync (absent: never). `checkpoints` (`emit.checkpoints.*`) follows the same
    rules."""
    result: dict[str, str] = {}
    for step in steps:
        interval, key = _interval(flow, step)
        before = last.get(step)
        if not interval.active:
            why = f"{key}.enabled=false" if not interval.enabled else \
                f"{key}.interval.seconds={interval.seconds}"
            first = step == "topics" and before is None
            result[step] = DUE if first else f"off ({why})"
        elif (force or not interval.explicit or before is None
              or now - before >= timedelta(seconds=interval.seconds)):
            result[step] = DUE
        else:
            next_at = before + timedelta(seconds=interval.seconds)
            result[step] = (f"not due until {next_at.isoformat(timespec='seconds')} "
                            f"({key}.interval.seconds={interval.seconds})")
    return result


PACED = ("heartbeats", "configs", "acls", "checkpoints", "lag")
"""The steps a long-running loop runs at their interval, not at every cycle. Topics are
not among them: a cycle lists both clusters' topics to plan anyway, so a new topic or
partition is mirrored within a cycle, where a long-running MM2 waits up to
`refresh.topics.interval.seconds`."""


FIRST_DUE_S = {"configs": 5.0, "acls": 10.0, "checkpoints": 15.0, "lag": 20.0}
"""When each paced step that moves no record is first due in a loop that follows another
run (`Pace.following`), in seconds from its start: apart, so no cycle takes two."""


@dataclass
class Pace:
    """When a long-running loop (`ferry mirror --continuous`, the `@continuous` DAG) last
    ran each paced step in this process. Cycles there are seconds apart, so each step runs
    at its interval as in a long-running MM2 (`emit.heartbeats.interval.seconds`,
    `sync.topic.configs.interval.seconds`, `sync.topic.acls.interval.seconds`,
    `emit.checkpoints.interval.seconds`, set or MM2's default), where a scheduled run,
    minutes apart, runs each at every run. Pure: the caller gives the (monotonic) time."""

    last: dict[str, float] = field(default_factory=dict)

    def due(self, step: str, interval: Interval, now: float) -> bool:
        """Whether `step` runs in this cycle. An inactive step is left to say why itself."""
        before = self.last.get(step)
        return not interval.active or before is None or now - before >= interval.seconds

    def ran(self, step: str, now: float) -> None:
        self.last[step] = now

    @classmethod
    def following(cls, flow: Flow, now: float) -> Pace:
        """The pace of a loop that follows a run of the same flow that ended moments ago
        (the `@continuous` DAG's next run), started at `now`: the steps that move no
        record are first due a few seconds in (`FIRST_DUE_S`, within their interval), one
        cycle at a time, not all in the first cycle, which copies what piled up while no
        loop ran. Heartbeats keep their interval from the start."""
        pace = cls()
        for step, after in FIRST_DUE_S.items():
            interval = interval_of(flow, step)
            pace.last[step] = now + min(after, interval.seconds) - interval.seconds
        return pace

    @staticmethod
    def why_not(interval: Interval) -> str:
        return f"not due (every {interval.seconds}s in a long-running loop)"

"""Cut over, or fail over, as one operation (`ferry failover`).

- **planned** (a migration, a DR drill; the source is up and its producers stopped):
  whole cycles until one finds nothing to copy (lag 0 on every partition), within a
  deadline; then every matching source group is translated exactly through the offset map
  and committed into the same group on the target, whatever `sync.group.offsets.enabled`
  says, but only into groups nobody consumes there and only forward.
- **unplanned** (the source is gone): the source is never contacted, so nothing waits on
  it. The groups' latest translations (the Delta `checkpoints` table) are committed the
  same way, and the report says per partition what never reached the target as of the last
  run (its recorded lag, in records and seconds).

Both report every group partition (source offset, target offset, exact or bounded, what
was done), say whether the reverse flow is ready for fail-back, and, when executed, store
the report as JSON under the state dir (`failover/`). Without `execute` nothing changes.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ferry.config import Config, Flow
from ferry.core.checkpoints import Checkpoint
from ferry.core.failover import (
    AtRisk,
    GroupLine,
    GroupOutcome,
    at_risk,
    group_filter,
    latest_rows,
    plan_commits,
)
from ferry.errors import TerminalError
from ferry.steps.clusters import Cluster
from ferry.steps.ports import CheckpointsTarget, StateStore

log = logging.getLogger(__name__)
PLANNED, UNPLANNED = "planned", "unplanned"


@dataclass
class FailoverReport:
    flow: str
    mode: str
    executed: bool
    cycles: int = 0
    lines: list[GroupLine] = field(default_factory=list)
    at_risk: list[AtRisk] = field(default_factory=list)
    reverse: dict[str, Any] = field(default_factory=dict)
    stored: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"flow": self.flow, "mode": self.mode, "executed": self.executed,
                "cycles": self.cycles, "groups": [line.to_json() for line in self.lines],
                "at_risk": [r.to_json() for r in self.at_risk], "reverse": self.reverse,
                "report": self.stored}

    def text(self) -> str:
        head = (f"{self.mode} failover of {self.flow}"
                + (f" after {self.cycles} cycles" if self.cycles else "")
                + ("" if self.executed else " (dry run: nothing changed; add --execute)"))
        lines = [head, *(f"  {line.text()}" for line in self.lines)]
        if not self.lines:
            lines.append("  no group has committed offsets on mirrored topics")
        for risk in self.at_risk:
            lines.append(f"  at risk: {risk.topic}-{risk.partition}: {risk.records} records, "
                         f"{risk.seconds:.1f}s (as of {risk.as_of.isoformat()})")
        lines.append(f"  fail-back: {self.reverse['hint']}")
        if self.stored:
            lines.append(f"  report: {self.stored}")
        return "\n".join(lines)


def planned(config_path: str, config: Config, flow: Flow, *, groups: str | None = None,
            deadline_s: float = 600.0, master: str | None = None, execute: bool = False,
            target: CheckpointsTarget | None = None) -> FailoverReport:
    """Cycles until the flow is caught up, then every matching group translated and
    committed on the target (see the module)."""
    from ferry.steps.checkpoints import reverse_of, translate_groups
    from ferry.steps.cycle import run as run_cycle

    report = FailoverReport(flow.name, PLANNED, execute)
    if execute:
        report.cycles = _catch_up(config_path, config, flow, deadline_s, master, run_cycle)
    else:
        from ferry.steps.plan import prepare

        # A dry run plans only: no plan file, no position restored, no topic touched.
        idle = prepare(flow, apply=False, restore=False).plan.is_idle
        log.info("dry run: the flow is %s", "caught up" if idle else "behind; --execute "
                 "runs cycles until it is caught up", extra={"flow": flow.name})
    wanted = group_filter(groups)
    found = [t for t in translate_groups(flow, reverse=reverse_of(config, flow))
             if wanted is None or wanted.fullmatch(t.group)]
    checkpoints = {(t.group, t.target_topic, t.partition): t.checkpoint() for t in found}
    report.lines = _commit(flow, [(t.group, t.topic, t.partition, t.source_offset,
                                   t.target_topic, t.status) for t in found],
                           checkpoints, execute, target)
    return _finish(config, flow, report)


def unplanned(config: Config, flow: Flow, *, groups: str | None = None,
              execute: bool = False, target: CheckpointsTarget | None = None,
              state: StateStore | None = None) -> FailoverReport:
    """The groups' latest translations committed on the target without a word to the
    source, and what is at risk (see the module); the translations and the lag are read
    from `state` (default: the flow's Delta tables)."""
    from ferry.state.store import DeltaStore

    report = FailoverReport(flow.name, UNPLANNED, execute)
    state = state or DeltaStore.of(flow)
    wanted = group_filter(groups)
    latest = [r for r in latest_rows(state.rows("checkpoints", flow.name),
                                     ("group_id", "source_topic", "source_partition"),
                                     "translated_at")
              if wanted is None or wanted.fullmatch(r["group_id"])]
    checkpoints = {(r["group_id"], r["target_topic"], r["source_partition"]): (
        Checkpoint(r["group_id"], r["target_topic"], r["source_partition"],
                   r["source_offset"], r["target_offset"])
        if r["target_offset"] is not None else None) for r in latest}
    report.lines = _commit(flow, [(r["group_id"], r["source_topic"], r["source_partition"],
                                   r["source_offset"], r["target_topic"], r["status"])
                                  for r in latest], checkpoints, execute, target)
    report.at_risk = at_risk(state.rows("lag", flow.name))
    if not latest:
        log.warning("no translation was ever recorded for this flow's groups: nothing to "
                    "commit (checkpoints run with each cycle)", extra={"flow": flow.name})
    return _finish(config, flow, report)


def _catch_up(config_path: str, config: Config, flow: Flow, deadline_s: float,
              master: str | None, run_cycle: Any) -> int:
    """Whole cycles until one plans nothing to copy; the number run. Past the deadline, or
    after a failed copy, a TerminalError says how far behind the flow still is."""
    started, cycles = time.monotonic(), 0
    while True:
        result = run_cycle(config_path, config, flow, master=master)
        cycles += 1
        if not result.ok:
            raise TerminalError(f"flow {flow.name}: cycle {result.run_id}'s copy failed (exit "
                                f"{result.copy_exit_code}); nothing was failed over")
        planned = result.planned
        if planned is not None and planned.idle:
            log.info("caught up after %d cycles", cycles, extra={"flow": flow.name})
            return cycles
        if time.monotonic() - started > deadline_s:
            span = planned.prepared.plan.span if planned else 0
            raise TerminalError(f"flow {flow.name}: still {span:,} records behind after "
                                f"{deadline_s:.0f}s ({cycles} cycles); are producers still "
                                "writing to the source? Nothing was failed over; raise "
                                "--deadline or stop the producers")


def _commit(flow: Flow, found: list[tuple[str, str, int, int, str, str]],
            checkpoints: dict[tuple[str, str, int], Checkpoint | None], execute: bool,
            target: CheckpointsTarget | None) -> list[GroupLine]:
    """Commit what can be into the target groups (when `execute`); a line per partition."""
    target = target or Cluster(flow.target_admin)
    usable = [c for c in checkpoints.values() if c is not None]
    states = target.describe_groups(sorted({c.group for c in usable})) if usable else {}
    outcomes = plan_commits(usable, states)
    if execute:
        by_group: dict[str, list[Checkpoint]] = {}
        for c in usable:
            if outcomes[c.key] == GroupOutcome.COMMITTED:
                by_group.setdefault(c.group, []).append(c)
        for group, mine in by_group.items():
            target.commit(group, mine)
            log.info("group %s committed on %s: %d partitions", group, flow.target, len(mine),
                     extra={"flow": flow.name})
    lines = []
    for group, topic, partition, source_offset, target_topic, status in found:
        found_c = checkpoints.get((group, target_topic, partition))
        outcome = GroupOutcome.NOTHING if found_c is None else outcomes[found_c.key]
        if outcome == GroupOutcome.COMMITTED and not execute:
            outcome = GroupOutcome.DRY_RUN
        lines.append(GroupLine(group, topic, partition, source_offset, target_topic,
                               None if found_c is None else found_c.downstream_offset, status,
                               outcome))
    return lines


def _finish(config: Config, flow: Flow, report: FailoverReport) -> FailoverReport:
    back = next((f for f in config.flows if (f.source, f.target) == (flow.target, flow.source)),
                None)
    name = f"{flow.target}->{flow.source}"
    report.reverse = {
        "flow": name, "configured": back is not None, "enabled": bool(back and back.enabled),
        "hint": (f"{name} is enabled: its DAG mirrors back" if back and back.enabled else
                 f"set {name}.enabled=true when the target takes the writes (and disable "
                 f"{flow.name}); its checkpoints then translate groups back exactly")}
    if report.executed:
        report.stored = str(_store(flow, report))
    return report


def _store(flow: Flow, report: FailoverReport) -> Path:
    state = flow.ferry.state_dir
    base = Path(state) if "://" not in state else Path(tempfile.gettempdir()) / "ferry-state"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = base / "failover" / f"{flow.dag_id}.{report.mode}.{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_json(), indent=2))
    return path

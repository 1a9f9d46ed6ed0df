"""One run of a flow, step by step: heartbeat -> sync -> plan -> copy -> record ->
checkpoints, in three parts: `Cycle.start` (up to the plan), `Cycle.copy`, `Cycle.finish`.
`ferry mirror` runs them all in one process through `run`; the flow DAG's `cycle` task does
too, unless the copy needs spark-submit, which Airflow's SparkSubmitOperator then runs as a
task of its own before a `finish` task. All call the same `Cycle` methods, so a cron-driven
`ferry mirror` writes heartbeats and checkpoints exactly as the DAG does, each when its
interval says so.

An idle run (nothing to copy, no gap, offset map up to date) starts no JVM.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.config import Config, Flow
from ferry.core import plan_file
from ferry.core.runners import Runner, runner_for
from ferry.core.sync.schedule import PACED, STEPS, Pace, interval_of
from ferry.core.takeover import Named, hands_over, names_itself
from ferry.errors import FerryError, TransientError
from ferry.heap import Trimming, limit_arenas
from ferry.state.store import DeltaStore
from ferry.steps.clusters import Cluster
from ferry.steps.plan import Prepared, new_run_id, prepare
from ferry.steps.ports import CopyRunner, LoopRuntime, NewestRuns, StateStore

if TYPE_CHECKING:
    from ferry.kafka.stuck import LeftBehind
    from ferry.steps.sync import SyncReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Planned:
    """The plan step's outcome: the plan, and its file when there is work for the copy."""

    prepared: Prepared
    offset_map_lag: int | None
    """Offset-map entries on the target not yet in Delta (None: not read, as a recorder
    appends them behind the copies, `ferry.runtime.recorder`)."""
    plan_path: str | None
    """The plan file the copy job reads (None: an idle run, or a runner handed the plan
    itself, `CopyRunner.reads_plan_file`)."""
    work: bool = True
    """Whether there is a copy to run; False for an idle run: the copy step is skipped."""

    @property
    def idle(self) -> bool:
        return not self.work

    def summary(self) -> dict[str, Any]:
        """Names and counts (an XCom, `--json`): never client settings."""
        plan = self.prepared.plan
        return {"idle": self.idle, "run_id": self.prepared.run_id, "ranges": len(plan.copies),
                "offsets": plan.span, "gaps": len(plan.gaps),
                "offset_map_lag": self.offset_map_lag, "plan": self.plan_path}


@dataclass
class CycleResult:
    """What `run` did, step by step."""

    flow: str
    run_id: str
    heartbeats: list[str] = field(default_factory=list)
    sync: dict[str, Any] = field(default_factory=dict)
    planned: Planned | None = None
    copy_exit_code: int | None = None
    """None: no copy (idle); else spark-submit's exit code."""
    copied: dict[str, Any] | None = None
    """The run as the copy job recorded it (None: no copy, or a job that left none)."""
    recorded: dict[str, Any] = field(default_factory=dict)
    checkpoints: dict[str, Any] = field(default_factory=dict)
    abandoned: bool = False
    """A continuous loop gave up waiting for it (`ferry.cycle.timeout.seconds`)."""
    handed_to: str | None = None
    """The later continuous run a loop handed over to after this cycle (or before any,
    as a result with no steps): the loop ended there, and what this cycle's lanes handed
    over (`handed-over` ranges, no failure) is that run's to copy."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds each part took: `start` (heartbeat, sync, plan), `copy`, `finish` (record,
    checkpoints); the parts that ran."""

    @property
    def ok(self) -> bool:
        return self.copy_exit_code in (None, 0) and not self.abandoned

    def steps(self) -> dict[str, Any]:
        """What each step did (names and counts: never client settings), in step order."""
        return {"heartbeat": self.heartbeats, "sync": self.sync,
                "plan": self.planned.summary() if self.planned else None,
                "copy": {"exit_code": self.copy_exit_code}, "record": self.recorded,
                "checkpoints": self.checkpoints}


@dataclass(frozen=True)
class Clusters:
    """A flow's two clusters, shared by the steps of a cycle, and across the cycles of a
    long-running loop: one admin client per cluster, not a few per step."""

    source: Cluster
    target: Cluster

    @classmethod
    def of(cls, flow: Flow) -> Clusters:
        return cls(Cluster(flow.source_admin), Cluster(flow.target_admin))


class Cycle:
    """The steps of one run of `flow` (`run_id` tags everything they record)."""

    def __init__(self, config: Config, flow: Flow, run_id: str | None = None,
                 master: str | None = None, pace: Pace | None = None,
                 clusters: Clusters | None = None, runner: CopyRunner | None = None,
                 state: StateStore | None = None, loops: LoopRuntime | None = None,
                 owner: Named | None = None) -> None:
        """`owner`: the continuous run the cycle is one of, as its lanes name it the flow's
        newest (`ferry.core.takeover`; None: a run of its own). `pace`: a long-running
        loop's memory of its paced steps (None: a run of its own,
        where every step runs when its config says). `clusters`: the flow's, made on first
        use when not given. `runner`: what runs the copy job (None: Spark on `master`, made
        by `copy` with the config's path). `state`: the flow's state (None: its Delta
        tables). `loops`: the runtime of the long-running loop the cycle is one of, where its
        Spark session, Delta recorder and kept lanes live from one cycle to the next (see
        `copy`); None: a run of its own."""
        self.config, self.flow = config, flow
        self.run_id = run_id or new_run_id()
        self.master = master or flow.ferry.spark_master
        self.pace = pace
        self._clusters = clusters
        self.runner = runner
        self.store = state or DeltaStore.of(flow)
        self.loops = loops
        self.owner = owner
        self.copies_with: Runner = runner_for(flow.ferry.copy_runner, looping=loops is not None)
        """Which runner copies when no `runner` is given (`ferry.core.runners`); for a run
        of its own, chosen again by `plan` once the plan's size is known."""
        self._synced: SyncReport | None = None
        """This cycle's sync: the plan takes its topics instead of listing them again."""

    @property
    def clusters(self) -> Clusters:
        if self._clusters is None:
            self._clusters = Clusters.of(self.flow)
        return self._clusters

    def _paced(self, step: str) -> bool:
        """Whether `step` is due now. It counts as run only once it succeeded (`_ran`): a
        step that failed is tried again in the next cycle, not an interval later."""
        if self.pace is None:
            return True
        return self.pace.due(step, interval_of(self.flow, step), time.monotonic())

    def _ran(self, *steps: str) -> None:
        if self.pace is not None:
            now = time.monotonic()
            for step in steps:
                self.pace.ran(step, now)

    def heartbeat(self) -> list[str]:
        """Write the flow's heartbeat (when `emit.heartbeats.enabled`): source->target."""
        from ferry.steps.heartbeats import emit

        if not self._paced("heartbeats"):
            return []
        target = self.clusters.target
        beats = [f"{b.source}->{b.target}" for b in emit([self.flow], connect=lambda _: target)]
        self._ran("heartbeats")
        return beats

    def sync(self) -> dict[str, Any]:
        """Topics, partitions, configs and ACLs, each step when its interval is due."""
        from ferry.steps.sync import sync_flow

        paced = {s: Pace.why_not(interval_of(self.flow, s)) for s in STEPS
                 if s in PACED and not self._paced(s)}
        report = sync_flow(self.flow, apply=True, run_id=self.run_id, state=self.store,
                           steps=[s for s in STEPS if s not in paced],
                           source=self.clusters.source, target=self.clusters.target)
        self._synced = report
        self._ran(*(s for s in STEPS if s in PACED and s not in paced))
        return {"steps": dict(report.steps) | paced, "changes": report.lines(),
                "warnings": list(report.warnings), "topics": len(report.mirrored)}

    def plan(self) -> Planned:
        """Plan exact ranges from the positions (expired ones restored from the offset map)
        and write the plan file when there is work: ranges, gaps, or offset-map entries
        Delta does not hold yet."""
        # a loop checks idle partitions' topic identity once per topic refresh interval
        # (`refresh.topics.interval.seconds`: one describe of each side's topics, about
        # 0.2 s each at 10,000 partitions); partitions with something to copy every cycle
        idle_identity = self.pace is None or self.pace.due(
            "identity", interval_of(self.flow, "topics"), time.monotonic())
        prepared = prepare(self.flow, apply=False, run_id=self.run_id, master=self.master,
                           sync=False, source=self.clusters.source,
                           target=self.clusters.target, synced=self._synced,
                           state=self.store, idle_identity=idle_identity)
        if idle_identity:
            self._ran("identity")
        if self.owner is not None:
            prepared = replace(prepared, owner=self.owner)
        # Recorded behind the copies, Delta's lag is the recorder's to close, and is not
        # read in every cycle (it grows between batches, and so would its reading).
        behind = self._records_behind()
        lag = None if behind else offset_map_lag(self.flow, self.clusters.target)
        work = needs_job(prepared, lag or 0)
        if work and self.loops is None and self.runner is None:
            self.copies_with = self._runner_for_plan(prepared.plan.span)
        if not work:
            log.info("nothing to copy: idle run, no job started", extra={"flow": self.flow.name})
        writes = work and (self.runner.reads_plan_file if self.runner is not None
                           else self.copies_with == "spark")
        return Planned(prepared, lag, write_plan(self.flow, prepared) if writes else None,
                       work=work)

    def _runner_for_plan(self, offsets: int) -> Runner:
        """A run of its own, its plan made: the local runner for a plan of at most
        `ferry.copy.local.max.records` offsets that would otherwise start spark-submit."""
        from ferry.spark.connect import is_connect

        runner = runner_for(self.flow.ferry.copy_runner, looping=False, planned=offsets,
                            local_max=self.flow.ferry.copy_local_max_records,
                            starts_spark=not is_connect(self.master))
        if runner != self.copies_with:
            log.info("copying %d offsets with the local runner, not spark-submit: at most "
                     "ferry.copy.local.max.records (%d), so copying them here costs less "
                     "than starting Spark", offsets, self.flow.ferry.copy_local_max_records,
                     extra={"flow": self.flow.name})
        return runner

    @property
    def copies_in_process(self) -> bool:
        """Whether this cycle's copy runs in its own process (the local runner, or a Spark
        Connect server's job driven from here), not as a spark-submit of its own."""
        from ferry.spark.connect import is_connect

        return self.copies_with == "local" or is_connect(self.master)

    def _records_behind(self) -> bool:
        """Whether this process appends the flow's Delta behind its copies (a warm
        continuous loop, `ferry.runtime.recorder`): an offset map Delta does not hold yet
        is then its recorder's to write, not a reason for a job."""
        if self.loops is None or self.runner is not None or self.copies_with != "local":
            return False
        return self.loops.records_behind(self.flow.name)

    def record(self, idle: bool, copied: dict[str, Any] | None = None) -> dict[str, Any]:
        """The run as recorded (the last attempt at each range), and a point of the lag
        history. `copied`: the run as its copy job recorded it, when the job ran in this
        cycle; else (the DAG's `finish`, after a `copy` task that may have been retried)
        it is read back from Delta."""
        from ferry.core.job import run_summary
        from ferry.core.tables import final_attempts
        from ferry.errors import FerryError
        from ferry.steps.lag import record_lag

        flow = self.flow
        try:
            if self._paced("lag"):
                record_lag(flow, self.run_id, source=self.clusters.source,
                           target=self.clusters.target, state=self.store)
                self._ran("lag")
        except FerryError as exc:  # brokers gone since the copy: a point of history lost
            log.warning("lag history not recorded: %s", exc, extra={"flow": flow.name})
        if idle:
            return {"idle": True}
        origin = "by its job"
        if copied is not None and copied.get("run_id") == self.run_id:
            summary = copied
        else:
            origin = "read back from Delta"
            store = self.store
            summary = run_summary(
                self.run_id, final_attempts(store.rows("runs", flow.name, run_id=self.run_id)),
                len(store.rows("gaps", flow.name, run_id=self.run_id)))
        logging.getLogger("ferry.record").info("run recorded (%s): %s", origin, summary,
                                               extra={"flow": flow.name})
        prune_plans(flow)
        return summary

    def checkpoints(self) -> dict[str, Any]:
        """Translate the flow's consumer groups (checkpoints, and group offsets on the
        target with sync.group.offsets.enabled), when `emit.checkpoints.*` says so."""
        from ferry.core.sync.schedule import DUE
        from ferry.steps.checkpoints import due, reverse_of
        from ferry.steps.checkpoints import run as translate

        if not self._paced("checkpoints"):
            return {"ran": False, "why": Pace.why_not(self.flow.emit_checkpoints)}
        why = due(self.flow, self.store)
        if why != DUE:
            self._ran("checkpoints")
            return {"ran": False, "why": why}
        report = translate(self.flow, run_id=self.run_id,
                           reverse=reverse_of(self.config, self.flow),
                           source=self.clusters.source, target=self.clusters.target,
                           state=self.store)
        self._ran("checkpoints")
        return {"ran": True, "translated": len(report.translations),
                "emitted": len(report.emitted), "synced_groups": sorted(report.synced),
                "active_groups_left_untouched": report.active}


    def start(self) -> CycleResult:
        """The steps before the copy: heartbeat, sync, plan. The heartbeat is written beside
        sync and plan (a new producer's start is most of its half second, and neither
        depends on it); a heartbeat that fails still fails the cycle before any copy."""
        result = CycleResult(self.flow.name, self.run_id)
        self._clusters = self.clusters  # made once, here, not by two threads at once
        with ThreadPoolExecutor(1, thread_name_prefix="ferry-heartbeat") as pool:
            beat = pool.submit(self.heartbeat)
            result.sync = self.sync()
            result.planned = self.plan()
            result.heartbeats = beat.result()
        return result

    def copy(self, result: CycleResult, config_path: str) -> bool:
        """The copy job of the started `result`'s plan, when it has one, through this
        cycle's runner (by default `copies_with`: the local runner, or Spark on its master,
        in this process through a Spark Connect server, else through spark-submit); its exit
        code and the run as it recorded it go into `result`. Whether the run goes on (no
        copy, or a copy that succeeded)."""
        planned = result.planned
        assert planned is not None, "start() first"
        if planned.idle:
            return True
        plan = planned.prepared.plan
        log.info("starting the copy job: %d ranges, %d offsets, %d gaps", len(plan.copies),
                 plan.span, len(plan.gaps), extra={"flow": self.flow.name})
        runner = self.runner or self._runner(config_path)
        copied = runner.run(planned.prepared.plan_file(), planned.plan_path)
        result.copy_exit_code, result.copied = copied.exit_code, copied.summary
        return result.ok

    def _runner(self, config_path: str) -> CopyRunner:
        """The runner `copies_with` names: in a loop, with what the loop keeps."""
        if self.copies_with == "local":
            from ferry.runtime.local import LocalRunner

            return self.loops.runner(self.flow) if self.loops is not None \
                else LocalRunner(self.flow)
        from ferry.spark.submit import SparkRunner

        return SparkRunner(str(Path(config_path).resolve()), self.flow, self.master,
                           self.loops.sessions if self.loops is not None else None,
                           self.config.connections)

    def finish(self, result: CycleResult) -> CycleResult:
        """The steps after a copy (or an idle plan): record, checkpoints."""
        assert result.planned is not None, "start() first"
        result.recorded = self.record(result.planned.idle, result.copied)
        result.checkpoints = self.checkpoints()
        return result


def offset_map_lag(flow: Flow, target: Cluster | None = None) -> int:
    """Committed offset-map entries on the target not yet in the Delta offset map
    (`ferry.steps.recording_lag`)."""
    from ferry.steps.recording_lag import recording_lag

    return recording_lag(flow, target).entries


def needs_job(prepared: Prepared, lag: int) -> bool:
    return bool(prepared.plan.ranges or prepared.plan.gaps or lag > 0)


def plans_dir(flow: Flow) -> Path:
    state = flow.ferry.state_dir
    base = Path(state) if "://" not in state else Path(tempfile.gettempdir()) / "ferry-state"
    return base / "plans" / flow.dag_id


PLAN_HISTORY = 20
"""A flow's cycle plan files kept after their runs were recorded, newest first, for
inspection; older ones are removed by the record step."""


def prune_plans(flow: Flow, keep: int = PLAN_HISTORY) -> list[Path]:
    """Remove the flow's cycle plan files beyond the newest `keep`, each with a connections
    snapshot its job may have left, and stale snapshots in its backfill folders (whose
    chunk plans stay with their backfill). Returns the plan files removed."""
    from ferry.config.connections import SNAPSHOT_SUFFIX, remove_snapshot, remove_stale_snapshots
    from ferry.core.job import RESULT_SUFFIX, result_path

    folder = plans_dir(flow)
    if not folder.is_dir():
        return []
    plans = [p for p in folder.glob("*.json")
             if not p.name.endswith((SNAPSHOT_SUFFIX, RESULT_SUFFIX))
             and not p.name.startswith(".")]
    plans.sort(key=lambda p: (_mtime_ns(p), p.name), reverse=True)
    removed = plans[keep:]
    for path in removed:
        for gone in (path, Path(result_path(str(path)))):  # a result no runner read: Airflow's
            with contextlib.suppress(FileNotFoundError):
                gone.unlink()
        remove_snapshot(str(path))
    remove_stale_snapshots(folder)
    for backfill in folder.glob("backfill-*"):
        if backfill.is_dir():
            remove_stale_snapshots(backfill)
    return removed


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:  # removed meanwhile: the oldest
        return 0


def write_plan(flow: Flow, prepared: Prepared) -> str:
    """The plan file the copy job reads (no secrets in it)."""
    return plan_file.write(plans_dir(flow) / f"{prepared.run_id}.json", prepared.plan_file(),
                           prepared.details())


def run(config_path: str, config: Config, flow: Flow,
        master: str | None = None, loops: LoopRuntime | None = None,
        pace: Pace | None = None, clusters: Clusters | None = None,
        run_id: str | None = None, runner: CopyRunner | None = None,
        owner: Named | None = None) -> CycleResult:
    """One whole run outside Airflow, the DAG's steps in the DAG's order. The copy goes
    through Spark on `master` (spark-submit's output to stderr); when it fails, the run
    stops there, as the DAG's record and checkpoints do not run after a failed copy.
    `loops`, `pace`, `clusters`, `runner` and `owner`: see `Cycle`."""
    cycle = Cycle(config, flow, run_id=run_id, master=master, pace=pace, clusters=clusters,
                  runner=runner, loops=loops, owner=owner)
    began = time.monotonic()
    result = cycle.start()
    started = time.monotonic()
    result.timings["start"] = round(started - began, 3)
    copied = cycle.copy(result, config_path)
    ended = time.monotonic()
    result.timings["copy"] = round(ended - started, 3)
    if not copied:
        return result
    cycle.finish(result)
    result.timings["finish"] = round(time.monotonic() - ended, 3)
    return result


def run_continuously(config_path: str, config: Config, flow: Flow,
                     on_cycle: Callable[[CycleResult, float], None],
                     master: str | None = None, for_s: float | None = None,
                     pause_s: float = 0.0, stop: Callable[[], bool] = lambda: False,
                     runner: CopyRunner | None = None, hand_over: bool = False,
                     owner: Named | None = None, newest: NewestRuns | None = None,
                     left_behind: LeftBehind | None = None,
                     loops: LoopRuntime | None = None,
                     clusters: Callable[[Flow], Clusters] | None = None) -> CycleResult | None:
    """Cycles back to back (each `run`, so each exactly once, with heartbeats, sync and
    checkpoints when their intervals say), `pause_s` apart and their starts at least
    `ferry.continuous.interval.seconds` apart, for `for_s` seconds (None: until
    `stop()`), a started cycle always finished or abandoned. `on_cycle(result, seconds)`
    after each. Stops at the first failed cycle and returns it; else returns the last one
    (None when none ran). A Spark Connect session and one admin client per cluster stay
    open across cycles. Heartbeats, config and ACL sync, checkpoints and the lag history
    run at their intervals (`Pace`), not at every cycle.

    A cycle still running after `ferry.cycle.timeout.seconds` is abandoned as hung (its
    result `abandoned`): the next starts at once with clients of its own, and its writers,
    holding the same writer ids, fence whatever the hung one still writes (G11). `runner`
    runs every cycle's copy (None: `ferry.copy.runner`'s). What hung cycles and stuck
    producer calls leave behind (threads, and the clients they hold) is bounded
    (`left_behind`, default the loop runtime's, `LoopRuntime.left_behind`, which its kept
    lanes count their stuck producer calls in): past the bound the loop raises
    a `TransientError` naming it, in one line, for its supervisor (the `@continuous` DAG's
    next run, systemd) to start it afresh. `clusters` makes the flow's clusters, at the
    start and after a hung cycle (default `Clusters.of`: Kafka's).

    `hand_over` (the `@continuous` DAG, whose next run takes over as this one ends): a loop
    that ends at the end of `for_s` leaves the Delta batch of its last stretch to the next
    run, which records it from the offset-map topic as its lanes reported it, and starts
    no batch that would outlast it; so the next run's first cycle waits for no batch; and
    so does one stopped by `stop()` (Airflow's SIGTERM, seconds before its SIGKILL). A loop
    that stops otherwise (a failed cycle, or `stop()` without `hand_over`) writes its last
    batch. Such a
    loop also follows a run: its first cycle copies what piled up at the turn and leaves
    the paced steps that move no record to the cycles after (`Pace.following`).

    What lives from one cycle to the next (the flow's Delta recorder and kept lanes, the
    Spark runner's session) is the loop's runtime, `loops` (default: a new
    `ferry.runtime.loop.Loop`, closed as the loop ends). With no `runner`, the local
    runner's recorder is made before the first cycle (`LoopRuntime.prepare`), or the Spark
    runner's session opened beside that cycle's sync and plan; the recorder's first batch
    starts once that cycle is done (`LoopRuntime.started`).

    `owner` (a run of the `@continuous` DAG): the continuous run the loop is, as its
    cycles' lanes name it the flow's newest (`ferry.core.takeover`), as it names itself
    after its first cycle too (one that copied nothing named nothing). Before each cycle,
    and after one that failed, the loop reads the newest run (`newest`; default: Kafka):
    once a later continuous run is named, the loop **hands over** to it and ends (its
    result's `handed_to`; a cycle whose lanes handed their ranges over to that run
    succeeded, and one that failed as it took over does not fail the loop), closing as at
    the end of `for_s`. Its next run can so start while
    this one still copies: the flow copies on through the turn (`docs/run.md`)."""
    deadline = None if for_s is None else time.monotonic() + for_s
    last: CycleResult | None = None
    loops = loops or _new_runtime()
    loop = _Looped(flow, loops, runner, following=hand_over, owner=owner,
                   left_behind=left_behind, clusters=clusters)
    ends_as_relay = False  # the last Delta batch left to the next run (`hand_over`)
    if hand_over and deadline is not None:
        loops.end_at(deadline)
    relay = _Relay(flow, owner, newest)
    limit_arenas()  # before the lanes' and clients' threads: see `ferry.heap`
    trimming = Trimming()
    try:
        loop.prepare(master)
        while not stop() and (deadline is None or time.monotonic() < deadline):
            if (handed := relay.handed_to()) is not None:
                last = last or CycleResult(flow.name, owner.run if owner else "")
                last.handed_to, ends_as_relay = handed, True
                return last
            started = time.monotonic()
            last = loop.cycle(config_path, config, master, on_cycle)
            if last.abandoned:
                continue
            if not last.ok:
                last.handed_to = relay.handed_to()
                ends_as_relay = last.handed_to is not None
                return last
            relay.named(last.run_id)
            trimming.after_cycle()  # the loop's memory stays level (`ferry.heap`)
            _pause(rest(started, pause_s, flow.ferry.continuous_interval_seconds),
                   deadline, stop)
        # At its end, or stopped by its supervisor: a run of the relay ends as at its end
        # either way, since Airflow gives a task it sends SIGTERM seconds before SIGKILL,
        # too few for a Delta append.
        stopped = stop()
        ends_as_relay = not stopped or hand_over
        if not stopped and last is not None and owner is not None:
            # at its end: whether the run after it is there already, to say it took over
            last.handed_to = relay.handed_to()
    finally:
        relay.close()
        loops.close(hand_over=hand_over and ends_as_relay)
    return last


def _new_runtime() -> LoopRuntime:
    from ferry.runtime.loop import Loop
    from ferry.spark.connect import ConnectSessions

    return Loop(sessions=ConnectSessions())


class _Relay:
    """Whether a continuous run's loop hands over: a later continuous run of the flow is
    named its newest (`ferry.core.takeover.hands_over`). Without an owner, never."""

    def __init__(self, flow: Flow, owner: Named | None, runs: NewestRuns | None) -> None:
        """`runs`: where the flow's newest run is read and named (default: Kafka)."""
        self.flow, self.owner, self._runs = flow, owner, runs
        self._opened: Any = None
        self._named = False
        self._seen: Named | None = None
        """The newest run as `handed_to` last read it."""

    def handed_to(self) -> str | None:
        if self.owner is None:
            return None
        self._seen = self.runs.read()
        handed = hands_over(self._seen, self.owner)
        if handed is not None:
            log.info("continuous run %s of the flow, later than this one (%s), names itself "
                     "the flow's newest: this run hands over to it and ends", handed,
                     self.owner.run, extra={"flow": self.flow.name})
        return handed

    def named(self, cycle: str) -> None:
        """After the loop's first cycle that succeeded (`cycle`, its run id): the run names
        itself the flow's newest, unless a later one is (an idle cycle copies nothing, so
        its lanes named nothing), so that the run before hands over now rather than at its
        run's end. Named with that cycle, as its lanes name it (`Named.cycle`): a cycle
        abandoned before it still yields to it.

        After a later cycle, named again when the name read before that cycle was another
        continuous run's that this one does not yield to: an earlier run that read the name just
        before this one named itself, then named itself over it (two runs of the DAG
        started at once). The name is the last commit, so each would otherwise go on as the
        one named, through idle cycles that name nothing, and the earlier would never
        hand over. No read of its own: one per cycle (`handed_to`'s) is enough, since a
        later run named meanwhile is read before the next cycle and named over by nobody
        earlier again."""
        if self.owner is None:
            return
        me = replace(self.owner, cycle=cycle)
        if not self._named:
            self._named = True
            if names_itself(self.runs.read(), me):
                self.runs.name(me)
        elif self._seen is not None and self._seen.continuous and self._seen.run != me.run:
            # not later than this run: `handed_to` would have handed over to it
            log.info("run %s of the flow named itself its newest over this one (%s), which "
                     "is later: this run names itself again", self._seen.run, me.run,
                     extra={"flow": self.flow.name})
            self.runs.name(me)

    @property
    def runs(self) -> NewestRuns:
        if self._runs is None:
            from ferry.kafka.runs import NewestRun

            self._runs = self._opened = NewestRun(self.flow)
        return self._runs

    def close(self) -> None:
        if self._opened is not None:
            self._opened.__exit__(None, None, None)
            self._opened = self._runs = None


def run_all(config_path: str, config: Config,
            on_cycle: Callable[[CycleResult, float], None],
            on_heartbeats: Callable[[list[str]], None],
            on_error: Callable[[Flow, FerryError], None],
            master: str | None = None, continuous: bool = False, for_s: float | None = None,
            pause_s: float = 0.0, stop: Callable[[], bool] = lambda: False,
            loops: LoopRuntime | None = None, runner: CopyRunner | None = None,
            clusters: Callable[[Flow], Clusters] | None = None) -> bool:
    """Every enabled flow of `config` and every heartbeat-only pair (a pair whose data flow
    is off but whose heartbeats are on), as MirrorMaker 2's dedicated mode runs all of a
    config's connectors: each round writes the heartbeat-only pairs' heartbeats (so a flow
    that mirrors the `heartbeats` topic carries them on, and MM2's `upstreamClusters` sees
    the way back), then runs one cycle of each flow in the config's order.

    Once (`continuous` false): one round; a flow whose cycle fails (`on_cycle` sees its
    result, `on_error` an error raised before its copy) does not keep the others from
    running. Continuous: rounds back to back as `run_continuously` runs cycles (paced steps,
    hung cycles abandoned, `pause_s` between rounds, for `for_s` or until `stop()`), ending
    after the round in which a cycle failed. Returns whether every cycle succeeded. A
    continuous run's flows share one runtime (`loops`, as `run_continuously`'s; `runner`
    and `clusters` as there), and keep
    their memory level as one loop does (`ferry.heap`)."""
    from ferry.steps.heartbeats import heartbeat_only_pairs

    deadline = None if for_s is None else time.monotonic() + for_s
    runtime = (loops or _new_runtime()) if continuous else None
    flows = [_Looped(flow, runtime, runner, clusters=clusters)
             for flow in config.enabled_flows]
    pairs, beats = heartbeat_only_pairs(config), Pace()
    ok = True
    interval = min((f.ferry.continuous_interval_seconds for f in config.enabled_flows),
                   default=0.0)
    trimming = Trimming()
    if continuous:
        limit_arenas()  # before the lanes' and clients' threads: see `ferry.heap`
    try:
        for loop in flows if continuous else []:
            loop.prepare(master)
        while not stop() and (deadline is None or time.monotonic() < deadline):
            started = time.monotonic()
            on_heartbeats(_heartbeat_only(pairs, beats if continuous else None))
            for loop in flows:
                if stop():
                    break
                try:
                    result = loop.cycle(config_path, config, master, on_cycle,
                                        looping=continuous)
                except FerryError as exc:
                    on_error(loop.flow, exc)
                    ok = False
                    continue
                ok = ok and (result.ok or result.abandoned)
            if not continuous or not ok:
                break
            trimming.after_cycle()  # the loop's memory stays level (`ferry.heap`)
            _pause(rest(started, pause_s, interval), deadline, stop)
    finally:
        if runtime is not None:
            runtime.close()
    return ok


def _heartbeat_only(pairs: list[Flow], pace: Pace | None) -> list[str]:
    """The heartbeats of `pairs` that are due (all of them without `pace`), written."""
    from ferry.steps.heartbeats import emit

    now = time.monotonic()
    due = [f for f in pairs
           if pace is None or pace.due(f"heartbeats {f.name}", interval_of(f, "heartbeats"), now)]
    if not due:
        return []
    sent = [f"{b.source}->{b.target}" for b in emit(due)]
    for flow in due:
        if pace is not None:
            pace.ran(f"heartbeats {flow.name}", now)
    return sent


class _Looped:
    """One flow in a long-running loop: its paced steps and its clients, kept across its
    cycles."""

    def __init__(self, flow: Flow, loops: LoopRuntime | None, runner: CopyRunner | None = None,
                 following: bool = False, owner: Named | None = None,
                 left_behind: LeftBehind | None = None,
                 clusters: Callable[[Flow], Clusters] | None = None) -> None:
        """`loops`: the loop's runtime (None: cycles of their own, not looping).
        `following`: the loop follows a run of the flow that ended moments ago, whose
        paced steps ran then (`Pace.following`). `owner`: the continuous run the loop is
        (`Cycle`). `left_behind`: where the threads of cycles abandoned as hung are counted
        against their bound (default: the loop runtime's, with its lanes' stuck producer
        calls). `clusters`: makes the flow's clusters, at the start and for the cycle after
        one abandoned as hung (default `Clusters.of`: Kafka's)."""
        from ferry.kafka.stuck import LeftBehind

        self._clusters_of = clusters or Clusters.of
        self.flow, self.clusters, self.owner = flow, self._clusters_of(flow), owner
        self.left = left_behind or (loops.left_behind if loops is not None else LeftBehind())
        self.pace = Pace.following(flow, time.monotonic()) if following else Pace()
        self.runner, self.loops = runner, loops
        self.started = False
        """Its first looping cycle is done (`LoopRuntime.started`)."""

    def prepare(self, master: str | None) -> None:
        """Before the first cycle: the local runner's recorder made
        (`LoopRuntime.prepare`), or the Spark runner's session opened beside that cycle's
        sync and plan. Nothing for a `runner` of its own."""
        if self.loops is None or self.runner is not None:
            return
        if runner_for(self.flow.ferry.copy_runner, looping=True) == "local":
            self.loops.prepare(self.flow)
        elif self.loops.sessions is not None:
            self.loops.sessions.prepare(master or self.flow.ferry.spark_master)

    def cycle(self, config_path: str, config: Config, master: str | None,
              on_cycle: Callable[[CycleResult, float], None], looping: bool = True
              ) -> CycleResult:
        """One cycle (`run`), reported to `on_cycle`. Looping, it keeps its session and
        clients for the next, and one still running after `ferry.cycle.timeout.seconds` is
        abandoned as hung: the next starts with clients of its own, and its writers, holding
        the same writer ids, fence whatever the hung one still writes (G11). Once its first
        looping cycle is done, what `prepare` readied for after it starts
        (`LoopRuntime.started`)."""
        flow = self.flow
        started, run_id = time.monotonic(), new_run_id()
        if not looping:
            result = run(config_path, config, flow, master=master, run_id=run_id,
                         runner=self.runner, owner=self.owner, clusters=self.clusters)
            on_cycle(result, time.monotonic() - started)
            return result
        try:
            return self._looping(config_path, config, master, on_cycle, started, run_id)
        finally:
            if not self.started:
                self.started = True
                if self.loops is not None and self.runner is None:
                    self.loops.started(flow)

    def _looping(self, config_path: str, config: Config, master: str | None,
                 on_cycle: Callable[[CycleResult, float], None], started: float,
                 run_id: str) -> CycleResult:
        flow = self.flow
        limit = flow.ferry.cycle_timeout_seconds
        from ferry.kafka.stuck import within

        returned, done = within(partial(run, config_path, config, flow, master=master,
                                        loops=self.loops, pace=self.pace,
                                        clusters=self.clusters, run_id=run_id,
                                        runner=self.runner, owner=self.owner),
                                limit, f"cycle {run_id}", self.left)
        if not returned or done is None:
            log.error("cycle %s still runs after %.0f s (ferry.cycle.timeout.seconds): "
                      "abandoned as hung; the next cycle starts now, and its writers "
                      "fence the hung one's", run_id, limit, extra={"flow": flow.name})
            if self.loops is not None:
                self.loops.abandoned(flow.name, run_id)
            done, self.clusters = CycleResult(flow.name, run_id, abandoned=True), \
                self._clusters_of(flow)
        on_cycle(done, time.monotonic() - started)
        if (over := self.left.over()) is not None:
            raise TransientError(f"flow {flow.name}: {over}")
        return done


def rest(started: float, pause_s: float, interval_s: float,
         now: Callable[[], float] = time.monotonic) -> float:
    """How long a loop waits before its next cycle (or round), which started at `started`:
    `pause_s` after it ended (`--pause`), and at least until `interval_s` after its start
    (`ferry.continuous.interval.seconds`)."""
    return max(pause_s, interval_s - (now() - started), 0.0)


def _pause(pause_s: float, deadline: float | None, stop: Callable[[], bool]) -> None:
    if pause_s:
        wait = pause_s if deadline is None else min(pause_s, deadline - time.monotonic())
        _sleep(max(0.0, wait), stop)


def _sleep(seconds: float, stop: Callable[[], bool]) -> None:
    """Sleep `seconds`, waking early when `stop()` turns true."""
    until = time.monotonic() + seconds
    while not stop() and time.monotonic() < until:
        time.sleep(min(0.2, until - time.monotonic()))

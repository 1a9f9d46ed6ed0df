"""A long-running loop: its paced steps (lag, heartbeats, sync, checkpoints) count as run
only once they succeeded (a step that failed is tried again in the next cycle, not an
interval later), and a cycle that hangs is abandoned at its limit. Its cycles are whole
cycles against in-memory clusters, their copies through a stand-in runner (`StandIn`) and,
where the test asks, a fake runtime (`FakeLoops`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

import ferry.steps.lag
from ferry.config import Config, Flow
from ferry.core.internal import offset_map_topic
from ferry.core.job import Copied, run_summary
from ferry.core.plan_file import PlanFile
from ferry.core.sync.schedule import Pace
from ferry.core.takeover import Named
from ferry.errors import TransientError
from ferry.kafka.stuck import LeftBehind
from ferry.steps.cycle import Clusters, Cycle
from tests.unit.steps.conftest import ConfigWith
from tests.unit.steps.fakes import FakeCluster


def fake_clusters(flow: Flow) -> Clusters:
    """`flow`'s two clusters in memory: `orders` on the source with records waiting (no
    position ever moves, so every cycle has a copy for its runner), its remote topic and the
    offset-map topic on the target."""
    remote = flow.remote_topic("orders")
    source = FakeCluster(flow.source, ids={"orders": "s1"}).topic("orders", 5, 5)
    target = FakeCluster(flow.target, ids={remote: "t1"}).topic(remote, 0, 0) \
        .topic(offset_map_topic(flow), 0)
    return Clusters(source, target)  # type: ignore[arg-type]


class StandIn:
    """A copy runner (`ferry.steps.ports.CopyRunner`) that copies nothing: each plan it is
    handed goes to `seen(run_id)`, and the job exits 1 for a flow in `failed`, else 0. The
    first `hang` jobs wait until `release` is set (a copy that never ends); `raises(flow,
    n)` may raise for the flow's n-th job (a cluster that is down)."""

    reads_plan_file = False

    def __init__(self, seen: Callable[[str], object] = lambda _id: None,
                 failed: bool = False, hang: int = 0,
                 raises: Callable[[str, int], None] = lambda _flow, _n: None) -> None:
        self.seen, self.failed, self.hang, self.raises = seen, failed, hang, raises
        self.jobs: list[str] = []
        self.by_flow: dict[str, int] = {}
        self.release = threading.Event()

    def run(self, plan: PlanFile, plan_path: str | None = None) -> Copied:
        self.jobs.append(plan.run_id)
        self.by_flow[plan.flow] = self.by_flow.get(plan.flow, 0) + 1
        self.raises(plan.flow, self.by_flow[plan.flow])
        self.seen(plan.run_id)
        if len(self.jobs) <= self.hang:
            self.release.wait(30)
        return Copied(1 if self.failed else 0, run_summary(plan.run_id, [], 0))


def looping(config_with: ConfigWith, interval: float, seen: Callable[[str], object],
            failed: bool = False) -> tuple[Config, Flow, StandIn]:
    """(config, its flow A->B, the runner of its copies) with cycles `interval` s apart; each
    cycle's copy calls `seen(run_id)` and fails when `failed`."""
    config = config_with(f"ferry.continuous.interval.seconds = {interval}\n")
    return config, config.flow("A->B"), StandIn(seen, failed)


class FakeLoops:
    """A loop's runtime (`ferry.steps.ports.LoopRuntime`) that keeps what the loop asks of
    it: `events` in order, each end it is told of, and each close's `hand_over`."""

    def __init__(self, runner: StandIn | None = None) -> None:
        self.copies = runner
        self.events: list[str] = []
        self.ends: list[float | None] = []
        self.closed: list[bool] = []
        self.left_behind = LeftBehind()

    def end_at(self, when: float | None) -> None:
        self.ends.append(when)

    sessions: Any = None

    def prepare(self, flow: Any) -> None:
        self.events.append("prepare")

    def started(self, flow: Any) -> None:
        self.events.append("started")

    def records_behind(self, flow_name: str) -> bool:
        return False

    def abandoned(self, flow_name: str, run_id: str) -> None:
        self.events.append(f"abandoned {run_id}")

    def runner(self, flow: Any) -> StandIn:
        assert self.copies is not None, "a runtime given no runner runs no job"
        return self.copies

    def close(self, hand_over: bool = False) -> None:
        self.closed.append(hand_over)


def test_a_lag_point_that_failed_is_taken_again_in_the_next_cycle(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a continuous loop's pace, and a target that fails the first lag point
    flow = config.flow("A->B")
    calls: list[str] = []

    def record_lag(_flow: Any, run_id: str, **_: Any) -> None:
        calls.append(run_id)
        if len(calls) == 1:
            raise TransientError("cluster B: reading the end of A.orders-0 failed")

    monkeypatch.setattr(ferry.steps.lag, "record_lag", record_lag)
    pace = Pace()
    clusters = Clusters(FakeCluster("A"), FakeCluster("B"))  # type: ignore[arg-type]

    # when: two idle cycles a moment apart (the lag interval is a minute)
    for run_id in ("one", "two", "three"):
        Cycle(config, flow, run_id, pace=pace, clusters=clusters).record(idle=True)

    # then: the failed point was taken again at once; the one after it waits its interval
    assert calls == ["one", "two"]


def test_a_hung_cycle_is_abandoned_and_the_next_one_runs_with_clients_of_its_own(
    config_with: ConfigWith
) -> None:
    # given: a loop whose cycles may take 2 s, and a first cycle whose copy never ends
    from ferry.steps.cycle import CycleResult, run, run_continuously

    config = config_with("ferry.cycle.timeout.seconds = 2\n")
    flow = config.flow("A->B")
    runner, made = StandIn(hang=1), []

    def clusters(of: Flow) -> Clusters:
        made.append(fake_clusters(of))
        return made[-1]

    reported: list[CycleResult] = []
    # a cycle of its own first: what a process's first cycle costs once (imports, the state
    # tables' first reads) would otherwise make the loop's second cycle late too
    run("mm2.properties", config, flow, runner=StandIn(), clusters=fake_clusters(flow))

    # when: the loop runs three cycles
    try:
        run_continuously("mm2.properties", config, flow, lambda r, _s: reported.append(r),
                         stop=lambda: len(reported) >= 3, runner=runner, clusters=clusters)
    finally:
        runner.release.set()

    # then: the first was abandoned as hung, the next ones ran, on new clients
    assert [r.abandoned for r in reported] == [True, False, False]
    assert [r.run_id for r in reported] == runner.jobs[:3]
    assert len(made) == 2  # the loop's, then the next cycle's after the hung one
    assert not reported[0].ok


def test_a_loop_whose_abandoned_cycles_leave_more_than_its_bound_alive_exits_naming_it(
    config_with: ConfigWith
) -> None:
    # given: a loop whose cycles may take 0.2 s, every one of which hangs, and a bound of
    # one thread left behind
    from ferry.steps.cycle import CycleResult, run_continuously

    config = config_with("ferry.cycle.timeout.seconds = 0.2\n")
    flow = config.flow("A->B")
    runner = StandIn(hang=99)
    reported: list[CycleResult] = []
    left = LeftBehind(bound=1)

    # when / then: the second abandoned cycle is one thread too many: the loop ends with
    # one line naming the bound (a supervisor starts it afresh), and runs no third cycle
    try:
        with pytest.raises(TransientError, match="more than its bound of 1") as raised:
            run_continuously("mm2.properties", config, flow,
                             lambda r, _s: reported.append(r), left_behind=left,
                             runner=runner, clusters=fake_clusters)
    finally:
        runner.release.set()
    assert "\n" not in str(raised.value)
    assert [r.abandoned for r in reported] == [True, True]


THREE_CLUSTERS = ("clusters = A, B, C\nC.bootstrap.servers = c:9092\nA->C.enabled = true\n"
                  "emit.heartbeats.interval.seconds = 3600\n")
"""A->B and A->C mirror; B->A, B->C, C->A and C->B only emit heartbeats (MM2's default)."""


def every_flow(config: Config, monkeypatch: pytest.MonkeyPatch, fails: set[tuple[int, str]],
               **loop: Any) -> tuple[bool, list[tuple[str, Any]]]:
    """`run_all` over `config` with cycles that succeed, except (round, flow) in `fails`,
    whose copy raises; (its outcome, what happened in order). The heartbeats of the
    heartbeat-only pairs are recorded, not sent."""
    from types import SimpleNamespace

    import ferry.steps.heartbeats
    from ferry.steps.cycle import run_all

    events: list[tuple[str, Any]] = []

    def raises(flow: str, n: int) -> None:
        events.append(("cycle", flow))
        if (n, flow) in fails:
            raise TransientError(f"cluster {flow.split('->')[1]}: down")

    def emit(flows: list[Any], connect: Any = None) -> list[Any]:
        if connect is None:  # the pairs' (a cycle's own are sent through its cluster)
            events.append(("heartbeats", sorted(f.name for f in flows)))
        return [SimpleNamespace(source=f.source, target=f.target) for f in flows]

    monkeypatch.setattr(ferry.steps.heartbeats, "emit", emit)
    ok = run_all("mm2.properties", config, lambda r, _s: events.append(("ok", r.flow)),
                 lambda sent: events.append(("sent", sent)),
                 lambda flow, exc: events.append(("failed", flow.name)),
                 runner=StandIn(raises=raises), clusters=fake_clusters, **loop)
    return ok, events


def test_every_flow_once_the_heartbeat_only_pairs_first_and_a_failing_flow_stops_no_other(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok, events = every_flow(config_with(THREE_CLUSTERS), monkeypatch, {(1, "A->B")})

    assert not ok
    assert events == [("heartbeats", ["B->A", "B->C", "C->A", "C->B"]),
                      ("sent", ["B->A", "B->C", "C->A", "C->B"]),
                      ("cycle", "A->B"), ("failed", "A->B"),
                      ("cycle", "A->C"), ("ok", "A->C")]


def test_every_flow_continuously_paces_the_heartbeats_and_ends_after_a_failed_round(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch
) -> None:
    # when: rounds back to back, A->B failing in the second
    ok, events = every_flow(config_with(THREE_CLUSTERS), monkeypatch, {(2, "A->B")},
                            continuous=True)

    # then: heartbeats at their interval (an hour: once), both flows in both rounds, and
    # the loop ended after the round that failed
    assert not ok
    assert [e for e in events if e[0] == "heartbeats"] == [
        ("heartbeats", ["B->A", "B->C", "C->A", "C->B"])]
    assert [e for e in events if e[0] in ("ok", "failed")] == [
        ("ok", "A->B"), ("ok", "A->C"), ("failed", "A->B"), ("ok", "A->C")]


@pytest.mark.parametrize(("took", "pause", "interval", "waits"), [
    (0.05, 0.0, 0.5, 0.45),  # an idle cycle waits out the rest of the interval
    (0.7, 0.0, 0.5, 0.0),    # a longer cycle is followed at once
    (0.05, 0.0, 0.0, 0.0),   # 0: back to back
    (0.05, 2.0, 0.5, 2.0),   # --pause counts from the cycle's end, and the longer one wins
    (0.3, 0.1, 0.5, 0.2),
])
def test_a_loop_rests_until_the_interval_from_its_cycles_start_or_its_pause(
    took: float, pause: float, interval: float, waits: float
) -> None:
    from ferry.steps.cycle import rest

    assert rest(10.0, pause, interval, now=lambda: 10.0 + took) == pytest.approx(waits)


def test_quick_cycles_of_a_loop_start_the_flows_interval_apart(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a loop whose flow's cycles start at least 0.4 s apart, and cycles that are quick
    import itertools
    import time

    from ferry.steps.cycle import run_continuously

    starts: list[float] = []
    config, flow, runner = looping(config_with, 0.4,
                                   lambda _id: starts.append(time.monotonic()))

    # when: it runs four cycles
    run_continuously("mm2.properties", config, flow, lambda _r, _s: None,
                     stop=lambda: len(starts) >= 4, runner=runner, clusters=fake_clusters)

    # then: each started about the interval after the one before, not at once (back to back
    # they would be milliseconds apart). A cycle runs in its own thread, whose start a loaded
    # machine can delay by tens of milliseconds, so one gap may fall that much short of the
    # interval and the next exceed it by as much; the loop paces from its own clock.
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) == 3 and all(0.25 <= g < 0.8 for g in gaps), gaps
    assert starts[-1] - starts[0] >= 3 * 0.4 - 0.15, gaps


@pytest.mark.parametrize(("hand_over", "how", "handed"), [
    (True, "time", True),      # the DAG's run ends: its next run follows at once
    # stopped by Airflow (SIGTERM, its SIGKILL 5 s later: too soon for a Delta append): the
    # next run, or the retry, records the batch from the offset-map topic
    (True, "stop", True),
    (True, "failed", False),   # a failed cycle: the task's retry is no hand-over either
    (False, "time", False),    # ferry mirror --continuous --for: its last batch is written
    (False, "stop", False),    # ferry mirror --continuous, stopped by a signal: written too
])
def test_a_loop_leaves_its_last_batch_to_the_next_run_only_when_its_run_ends_or_is_stopped(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch, hand_over: bool, how: str,
    handed: bool
) -> None:
    from ferry.steps.cycle import run_continuously

    loops = FakeLoops()
    cycles: list[str] = []
    config, flow, loops.copies = looping(config_with, 0.1, cycles.append,
                                         failed=how == "failed")

    run_continuously("mm2.properties", config, flow, lambda _r, _s: None, for_s=0.3,
                     stop=lambda: how == "stop" and len(cycles) >= 2, hand_over=hand_over,
                     loops=loops, clusters=fake_clusters)

    assert loops.closed == [handed]
    assert len(loops.ends) == int(hand_over)  # the recorders learn when the run ends


def test_a_loops_recorder_starts_its_first_batch_once_the_first_cycle_is_done(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch
) -> None:
    # at a turn of an @continuous DAG's runs, the first cycle copies what piled up while no
    # run copied; the recorder's first batch (Delta reads, pyarrow's imports) beside it took
    # its CPU and the GIL
    from ferry.steps.cycle import run_continuously

    loops = FakeLoops()
    events = loops.events
    config, flow, loops.copies = looping(config_with, 0, lambda _id: events.append("cycle"))

    run_continuously("mm2.properties", config, flow, lambda _r, _s: None,
                     master="sc://here", stop=lambda: events.count("cycle") >= 3, loops=loops,
                     clusters=fake_clusters)

    assert events == ["prepare", "cycle", "started", "cycle", "cycle"]
    assert loops.closed == [False]



EARLY, LATE = Named("scheduled__1", 1_000), Named("scheduled__2", 2_000)


class Runs:
    """The flow's newest run as a loop reads it: `answers` in order, the last one repeating;
    what the loop names itself is kept, and read by nobody."""

    def __init__(self, answers: list[Named]) -> None:
        self.answers, self.names = list(answers), list[Named]()

    def read(self) -> Named:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def name(self, named: Named) -> bool:
        self.names.append(named)
        return True


@pytest.mark.parametrize(("named", "failed", "cycles_run", "handed_to"), [
    # a later continuous run names itself after two cycles: the loop hands over to it
    # (read before each cycle, and once after the first, as the run names itself)
    ([EARLY, EARLY, EARLY, LATE], False, 2, "scheduled__2"),
    # the cycle in which the later run's writers took over failed (its lanes yielded):
    # the loop hands over all the same, and does not fail
    ([EARLY, LATE], True, 1, "scheduled__2"),
    # a try of this run after the later one started (a retry): it hands over at once
    ([LATE], False, 0, "scheduled__2"),
    # an earlier run, or a run of one cycle, named newest: the loop goes on to its end
    ([Named("scheduled__0", 500)], False, -1, None),
    ([Named("cycle-7")], False, -1, None),
    # a failed cycle with no later run named fails the loop, as before
    ([EARLY], True, 1, None),
])
def test_a_continuous_run_hands_over_to_a_later_one_named_the_flows_newest_and_ends(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch, named: list[Named],
    failed: bool, cycles_run: int, handed_to: str | None
) -> None:
    from ferry.steps.cycle import run_continuously

    loops = FakeLoops()
    closed = loops.closed
    cycles: list[str] = []
    config, flow, loops.copies = looping(config_with, 0.05, cycles.append, failed=failed)
    runs = Runs(named)
    # a loop that hands over, or fails, ends by itself: its span only bounds it (on a
    # loaded machine a first cycle took 2 s, past a short span, before the hand-over)
    span = 0.5 if cycles_run < 0 else 60

    last = run_continuously("mm2.properties", config, flow, lambda _r, _s: None, for_s=span,
                            hand_over=True, owner=EARLY, newest=runs, loops=loops,
                            clusters=fake_clusters)

    assert last is not None
    assert last.handed_to == handed_to
    if cycles_run >= 0:
        assert len(cycles) == cycles_run
    else:  # to the end of its span
        assert len(cycles) >= 3
    # a hand-over leaves the last Delta batch to the run that took over, as an end on time
    assert closed == [handed_to is not None or not failed]


@pytest.mark.parametrize(("named", "names"), [
    ([EARLY], [EARLY]),                       # no later run: it names itself once
    # an earlier run named: it goes on, named (read before its first cycle, as it names
    # itself, then its own name)
    ([Named("scheduled__0", 500), Named("scheduled__0", 500), EARLY], [EARLY]),
    ([EARLY, LATE], []),                      # a later run named by then: it hands over
])
def test_a_continuous_run_names_itself_after_its_first_cycle_even_when_that_copied_nothing(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch, named: list[Named],
    names: list[Named]
) -> None:
    # an idle cycle's lanes name nothing; named after its first cycle, a run makes the one
    # before hand over now, not at that run's end
    from ferry.steps.cycle import run_continuously

    cycles: list[str] = []
    config, flow, runner = looping(config_with, 0.05, cycles.append)
    runs = Runs(named)

    run_continuously("mm2.properties", config, flow, lambda _r, _s: None, for_s=0.4,
                     hand_over=True, owner=EARLY, newest=runs, loops=FakeLoops(runner),
                     clusters=fake_clusters)

    # named with the cycle after which it named itself, as its lanes name it
    assert [replace(n, cycle=None) for n in runs.names] == names
    assert all(n.cycle for n in runs.names)


def test_a_continuous_run_named_over_by_an_earlier_one_names_itself_again_so_that_one_hands_over(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two runs of the DAG start at once (a run queued while the DAG was paused, and the
    # next): the earlier read the name just before this run named itself, then named
    # itself over it. Idle cycles name nothing, so unless this run names itself again,
    # each run goes on as the one named and the earlier never hands over (both loops
    # copy until the earlier's hand-over time runs out)
    from ferry.steps.cycle import run_continuously

    earlier = Named("scheduled__0", 500)
    cycles: list[str] = []
    config, flow, runner = looping(config_with, 0.05, cycles.append)
    # read before each cycle (and once after the first, as the run names itself)
    runs = Runs([earlier, earlier, earlier, EARLY])

    run_continuously("mm2.properties", config, flow, lambda _r, _s: None, for_s=0.5,
                     hand_over=True, owner=EARLY, newest=runs, loops=FakeLoops(runner),
                     clusters=fake_clusters)

    assert [replace(n, cycle=None) for n in runs.names] == [EARLY, EARLY]


def test_a_continuous_run_at_its_end_says_it_handed_over_when_the_next_run_is_named_by_then(
    config_with: ConfigWith, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run whose last cycle outlasted its end, the next run named meanwhile: it ended on
    # time, and the next one has taken over
    import time

    from ferry.steps.cycle import run_continuously

    runs = Runs([EARLY])
    cycles: list[str] = []

    def seen(run_id: str) -> None:
        cycles.append(run_id)
        if len(cycles) == 2:  # the last cycle: past the run's end, the next run named
            time.sleep(0.4)
            runs.answers = [LATE]

    config, flow, runner = looping(config_with, 0.05, seen)
    last = run_continuously("mm2.properties", config, flow, lambda _r, _s: None, for_s=0.3,
                            hand_over=True, owner=EARLY, newest=runs,
                            loops=FakeLoops(runner), clusters=fake_clusters)

    assert len(cycles) == 2
    assert last is not None and last.ok and last.handed_to == LATE.run

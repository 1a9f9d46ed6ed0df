"""`ferry positions reset` beside a running continuous loop, on real brokers: the loop
leaves the reset the flow's writer slots while it writes them (`ferry.core.takeover`:
positions writes), and its cycles after the reset copy on from the reset positions. The
interleaving is forced: the reset is held after its first partition's write while the loop
runs cycles with new records."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from ferry.config import Flow
from ferry.core.job import Copied
from ferry.core.plan_file import PlanFile
from ferry.core.positions import PositionMoved, PositionWrite
from ferry.core.takeover import Named
from ferry.kafka.positions import PositionWriter
from ferry.runtime.kept_lanes import KeptLanes
from ferry.steps.clusters import Cluster
from ferry.steps.cycle import CycleResult, run_continuously
from ferry.steps.positions import Reset, reset
from tests.integration.test_kept_lanes import KeptHere, records
from tests.support.groups import positions
from tests.support.kafka_data import create_topic, flow_config, produce, read_all
from tests.support.polling import wait_until
from tests.support.stream import ends

pytestmark = [pytest.mark.integration]

PARTITIONS = 4


class HeldAfterFirst(Cluster):
    """The target as a reset writes it, the writes held after the first partition's until
    `go` is set (`written` set then)."""

    def __init__(self, flow: Flow) -> None:
        super().__init__(flow.target_admin)
        self.written, self.go = threading.Event(), threading.Event()

    def write_positions(self, flow: Flow, writes: Sequence[PositionWrite]
                        ) -> list[PositionMoved]:
        moved: list[PositionMoved] = []
        with PositionWriter(flow) as writer:
            for write in writes:
                found = writer.write(write)
                if found is not None:
                    moved.append(found)
                if not self.written.is_set():
                    self.written.set()
                    assert self.go.wait(60)
        return moved


class ReleasedBeforeACopy(KeptHere):
    """The loop's runner: with `release` set, the first copy it is given after the held
    reset wrote its first partition (`target.written`) lets the reset go on and waits
    until it is done, then copies the plan made before: a cycle planned from the positions
    the reset had not written yet, and copies after it named itself done."""

    def __init__(self, flow: Flow, lanes: KeptLanes, target: HeldAfterFirst,
                 release: bool) -> None:
        super().__init__(flow, lanes)
        self.target, self.release, self.reset_done = target, release, threading.Event()
        self.released_a_plan = False

    def run(self, plan: PlanFile, plan_path: str | None = None) -> Copied:
        if self.release and not self.released_a_plan and self.target.written.is_set():
            self.released_a_plan = True
            self.target.go.set()
            assert self.reset_done.wait(60)
        return super().run(plan, plan_path)


@pytest.mark.parametrize("release", [False, True],
                         ids=["held-while-two-cycles-run", "done-between-a-plan-and-its-copy"])
def test_a_positions_reset_beside_a_running_loop_completes_and_the_loop_copies_on_from_it(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, release: bool
) -> None:
    # given: a continuous run's loop keeping its lanes, over four partitions in two writer
    # slots, new records before each of its cycles
    create_topic(clusters["source"], topic_name, PARTITIONS)
    produce(clusters["source"], topic_name, records(200))
    config = flow_config(tmp_path, clusters, topic_name,
                         "ferry.writers = 2\nferry.cycle.timeout.seconds = 60\n")
    flow = config.enabled_flows[0]
    lanes = KeptLanes(flow)
    target = HeldAfterFirst(flow)
    runner = ReleasedBeforeACopy(flow, lanes, target, release)
    reported: list[CycleResult] = []
    feeding, stop = threading.Event(), threading.Event()
    feeding.set()
    sent = [200]

    def on_cycle(result: CycleResult, _s: float) -> None:
        if not reported:  # the reset starts after the first cycle, before the second
            assert target.written.wait(60)
        reported.append(result)
        if feeding.is_set():
            produce(clusters["source"], topic_name, records(8, sent[0]))
            sent[0] += 8

    raised: list[BaseException] = []

    def looping() -> None:
        try:
            run_continuously(config.path, config, flow, on_cycle, stop=stop.is_set,
                             runner=runner, owner=Named("continuous-run", 1_000))
        except BaseException as exc:  # reported below
            raised.append(exc)

    loop = threading.Thread(target=looping, daemon=True)
    remote = flow.remote_topic(topic_name)
    tps = [(remote, p) for p in range(PARTITIONS)]
    done: list[list[Reset]] = []
    failed: list[BaseException] = []

    def resetting() -> None:
        try:
            done.append(reset(flow, topic_name, "earliest", target=target))
        except BaseException as exc:  # reported below
            failed.append(exc)
        finally:
            runner.reset_done.set()

    # when: the loop copies; then a reset to the earliest offsets writes its first
    # partition and is held, either while the loop runs two more cycles with new records,
    # or until a cycle planned from the positions it had not written yet is to copy; then
    # it writes the rest, and the loop runs on until it copied every record
    loop.start()
    try:
        wait_until(lambda: min(positions(clusters, flow, tps)) > 0, "the loop copied")
        resetter = threading.Thread(target=resetting, daemon=True)
        resetter.start()
        assert target.written.wait(60)
        if not release:
            held_at = len(reported)
            wait_until(lambda: len(reported) >= held_at + 2, "two cycles during the reset")
            target.go.set()
        resetter.join(90)
        assert not resetter.is_alive()
        feeding.clear()
        wait_until(lambda: not loop.is_alive() or positions(clusters, flow, tps) == ends(
            clusters["source"], topic_name), "the loop copied on to the end", timeout=90)
        assert loop.is_alive(), (raised, [r.steps() for r in reported if not r.ok])
    finally:
        target.go.set()
        stop.set()
        loop.join(90)
        lanes.close()

    # then: the reset completed, and no cycle of the loop failed; each remote partition
    # holds what was copied before the reset, then the source again from its start: the
    # loop copied on from the reset positions, and never over them
    assert failed == [] and raised == []
    assert runner.released_a_plan == release
    assert all(r.ok for r in reported), [r.steps() for r in reported if not r.ok]
    (resets,) = done
    for r in resets:
        source = [x.content() for x in read_all(clusters["source"], topic_name, r.partition)]
        target_records = [x.content() for x in read_all(clusters["target"], remote,
                                                         r.partition)]
        assert r.before is not None and r.after == 0
        assert target_records == source[:r.before] + source, r

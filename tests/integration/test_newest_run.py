"""Two runs of one flow at once, on real brokers: Kafka's fencing keeps them exact, and the
newest run goes on while the older one yields (`ferry.core.takeover`), so they never both
fail. The interleavings are forced with writers held on events."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from ferry.config import Flow
from ferry.core.lanes import by_writer, writer_of
from ferry.core.planner import Range
from ferry.core.tables import RangeOutcome
from ferry.kafka.lane import Lane
from ferry.kafka.lane_state import Part
from ferry.runtime.job import failures, handovers
from ferry.runtime.slots import name_newest, write_slots
from ferry.steps.plan import prepare
from tests.support.kafka_data import assert_exact, create_topic, flow_config, pausing, produce
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 8


def two_slots(flow: Flow, topic: str) -> tuple[int, int]:
    """Two partitions of `topic` in different writer slots."""
    first = 0
    slot = writer_of(topic, first, flow.ferry.writers)
    other = next(p for p in range(1, PARTITIONS)
                 if writer_of(topic, p, flow.ferry.writers) != slot)
    return first, other


def planned(flow: Flow, topic: str, run_id: str) -> dict[int, list[Range]]:
    return by_writer(prepare(flow, run_id=run_id).plan.ranges, flow.ferry.writers)


def partition_zero(clusters: dict[str, str], topic: str, tmp_path: Path, run_id: str
                   ) -> tuple[Flow, int, list[Range], Lanes]:
    """A flow (tasks.max=2) of `topic` with 500 records in partition 0, and `run_id` named
    its newest run: the flow, the partition's writer slot, its ranges as `run_id` plans
    them, and lanes to run them."""
    create_topic(clusters["source"], topic, PARTITIONS)
    flow = flow_config(tmp_path, clusters, topic, "tasks.max = 2\n").enabled_flows[0]
    produce(clusters["source"], topic, [(None, f"v{i}".encode(), 0) for i in range(500)])
    slot = writer_of(topic, 0, flow.ferry.writers)
    ranges = planned(flow, topic, run_id)[slot]
    name_newest(flow, run_id, "")
    return flow, slot, ranges, Lanes(flow)


def newest_copied_all(lanes: Lanes, records: int, flow: Flow, clusters: dict[str, str],
                      topic: str, older_yielded: bool = False) -> None:
    """Run `newest` failed nowhere and copied `records`; every record is on the target
    once; with `older_yielded`, run `older` left its partitions to it (`assert_yielded`)."""
    assert lanes.failed("newest") == []
    assert lanes.copied("newest") == records
    assert_exact(flow, clusters, topic, PARTITIONS)
    if older_yielded:
        assert_yielded(lanes, "older", "newest")


def assert_yielded(lanes: Lanes, run_id: str, to: str) -> None:
    """`run_id` failed nowhere: it handed its partitions over to run `to`, saying so in one
    line, and its ranges are recorded as handed over, not failed."""
    assert lanes.failed(run_id) == []
    (line,) = lanes.handed(run_id)
    assert f"run {to} of the flow started after this one" in line and "\n" not in line
    assert RangeOutcome.HANDED_OVER.value in {r["outcome"] for r in lanes.rows[run_id]}


class Lanes:
    """Lanes of runs started in threads: each `write_slots` call's rows, by run."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.threads: list[threading.Thread] = []
        self.broke: list[BaseException] = []

    def start(self, run_id: str, slot: int, ranges: list[Range],
              writer: type[Lane] | None = None) -> threading.Thread:
        def lane() -> None:
            try:
                rows = write_slots(self.flow, run_id, [(slot, ranges)], "", writer)
                self.rows.setdefault(run_id, []).extend(rows)
            except BaseException as exc:  # reported by join_all
                self.broke.append(exc)

        thread = threading.Thread(target=lane, daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def held(self, run_id: str, slot: int, ranges: list[Range], at: str = "commit"
             ) -> threading.Event:
        """Start a lane of `run_id` whose writer stops at `at` (`pausing`); once it is
        there, the event that releases it."""
        reached, release = threading.Event(), threading.Event()
        self.start(run_id, slot, ranges, pausing(at, reached, release))
        assert reached.wait(60), f"the writer of {run_id} never reached {at}"
        return release

    def join_all(self) -> None:
        for thread in self.threads:
            thread.join(90)
        assert not any(t.is_alive() for t in self.threads), "a lane hung"
        assert self.broke == []

    def failed(self, run_id: str) -> list[str]:
        return failures(self.rows.get(run_id, []))

    def handed(self, run_id: str) -> list[str]:
        return handovers(self.rows.get(run_id, []))

    def copied(self, run_id: str) -> int:
        return sum(r["records"] for r in self.rows.get(run_id, []))


@pytest.mark.parametrize(("delivery", "at"), [("exactly_once", "commit"),
                                              ("at_least_once", "positions")])
def test_an_older_runs_lane_starts_no_slot_the_newest_run_is_writing(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, delivery: str, at: str
) -> None:
    # given: an older run (2 lanes) whose lane X holds slot S1 at `at`, and the newest run
    # (8 lanes), which took S1 from X and holds slot S2 at `at` in another lane
    create_topic(clusters["source"], topic_name, PARTITIONS)
    flow = flow_config(tmp_path, clusters, topic_name,
                       f"tasks.max = 2\nferry.delivery = {delivery}\n").enabled_flows[0]
    p1, p2 = two_slots(flow, topic_name)
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), p1 if i % 2 else p2) for i in range(600)])
    slots = planned(flow, topic_name, "older")
    s1, s2 = writer_of(topic_name, p1, flow.ferry.writers), writer_of(topic_name, p2,
                                                                      flow.ferry.writers)
    lanes = Lanes(flow)
    name_newest(flow, "older", "")
    x_release = lanes.held("older", s1, slots[s1], at)
    name_newest(flow, "newest", "")
    s2_release = lanes.held("newest", s2, slots[s2], at)
    lanes.start("newest", s1, slots[s1]).join(60)

    # when: the older run's other lane comes to S2, then everything goes on
    lanes.start("older", s2, slots[s2]).join(60)
    s2_release.set()
    wait_until(lambda: any(r["lane"] == s2 for r in lanes.rows.get("newest", [])),
               "the newest run's lane of S2 finished")
    x_release.set()
    lanes.join_all()

    # then: the newest run copied everything and failed nowhere; the older one left both
    # slots to it, saying so in one line; every record is on the target once
    newest_copied_all(lanes, 600, flow, clusters, topic_name, older_yielded=True)

    # when: both runs' rows are recorded, the older run's finishing last (its writer held
    # at `at` ended after the newest run's lanes), and `ferry status` is asked
    from ferry.config import load_config
    from ferry.core.tables import RUNS_DDL, StatePaths
    from ferry.observe.status import flow_status
    from ferry.state.writer import append

    append(StatePaths(flow.ferry.state_dir).runs, RUNS_DDL,
           lanes.rows["newest"] + lanes.rows["older"])
    status = flow_status(load_config(str(tmp_path / "mm2.properties")), flow)

    # then: the flow's last run handed over; it did not fail
    assert (status.last_run, status.last_run_outcome) == ("older", "handed-over")
    assert "last run older handed over;" in status.text()


def test_the_newest_run_takes_back_a_slot_an_older_run_took_just_as_it_started(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: an older run's lane Y has read that its run is the newest and is about to
    # take slot S (held just before init_transactions); then the newest run is named, and
    # its lane takes S and holds its first transaction open
    flow, slot, ranges, lanes = partition_zero(clusters, topic_name, tmp_path, "older")
    y = Stepped()
    lanes.start("older", slot, ranges, y.writer())
    assert y.before_init.wait(60)
    name_newest(flow, "newest", "")
    release = lanes.held("newest", slot, ranges)

    # when: Y takes the slot (fencing the newest run's writer) and opens a transaction;
    # then the newest run's writer goes on, and finally Y does
    y.go_init.set()
    assert y.in_commit.wait(60)
    release.set()
    wait_until(lambda: "newest" in lanes.rows, "the newest run's lane finished")
    y.go_commit.set()
    lanes.join_all()

    # then: the newest run took the slot back and copied every record; the older run
    # yielded, saying why in one line; every record is on the target once
    newest_copied_all(lanes, 500, flow, clusters, topic_name, older_yielded=True)


def test_a_run_whose_slot_was_taken_by_the_newest_run_does_not_take_it_back(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: an older run's writer holds its first transaction open on slot S
    flow, slot, ranges, lanes = partition_zero(clusters, topic_name, tmp_path, "older")
    release = lanes.held("older", slot, ranges)

    # when: the newest run copies the slot, then the older writer goes on
    name_newest(flow, "newest", "")
    lanes.start("newest", slot, ranges).join(60)
    release.set()
    lanes.join_all()

    # then: the older run stopped (one start of its writer only) and the newest copied all
    newest_copied_all(lanes, 500, flow, clusters, topic_name)
    assert [r["outcome"] for r in lanes.rows["older"]] == [RangeOutcome.HANDED_OVER.value]


class Stepped:
    """A writer class held twice: just before it initialises its transactional id
    (`before_init` set, until `go_init`) and inside its first transaction (`in_commit`
    set, until `go_commit`)."""

    def __init__(self) -> None:
        self.before_init, self.go_init = threading.Event(), threading.Event()
        self.in_commit, self.go_commit = threading.Event(), threading.Event()

    def writer(self) -> type[Lane]:
        steps = self

        class Held(Lane):
            def _start_producer(self, diagnose: bool = False) -> Producer:
                if not steps.before_init.is_set():
                    steps.before_init.set()
                    steps.go_init.wait(60)
                return super()._start_producer(diagnose)

            def commit(self, producer: Producer, metadata: object, parts: list[Part]) -> None:
                if not steps.in_commit.is_set():
                    steps.in_commit.set()
                    steps.go_commit.wait(60)
                super().commit(producer, metadata, parts)

        return Held





def test_a_run_yields_to_positions_written_meanwhile_and_leaves_them_as_written(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: the flow's newest run holds its first transaction open on partition 0
    from ferry.core.positions import PositionWrite
    from ferry.kafka.cluster import KafkaCluster
    from tests.support.groups import positions

    flow, slot, ranges, lanes = partition_zero(clusters, topic_name, tmp_path, "run")
    release = lanes.held("run", slot, ranges)

    # when: an operator's positions write (a reset) moves partition 0 to 300, then the
    # run goes on
    KafkaCluster(flow.target_admin).write_positions(flow, [PositionWrite(topic_name, 0, 300, None,
                                                                   expect=None)])
    release.set()
    lanes.join_all()

    # then: the run yielded to the write, saying so (no failure), and the position is the
    # one written
    assert lanes.failed("run") == []
    (line,) = lanes.handed("run")
    assert "run positions-" in line and "started after this one" in line
    assert positions(clusters, flow, [(flow.remote_topic(topic_name), 0)]) == [300]


def test_a_writer_replacing_its_stuck_producer_yields_to_a_newer_run_instead_of_fencing_it(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: an older run's writer inside its first transaction, about to find its producer
    # stuck (`kafka/stuck.py`: the bounded call gave up on it), which a writer replaces
    # with a new producer of the slot's id; meanwhile the newest run is named and its
    # writer of the slot holds its first transaction open
    from functools import partial

    from ferry.core.takeover import Named
    from ferry.kafka.runs import NewestRun
    from ferry.kafka.stuck import ProducerStuck

    flow, slot, ranges, lanes = partition_zero(clusters, topic_name, tmp_path, "older")
    started: list[str] = []
    stuck, unstick = threading.Event(), threading.Event()

    class Stuck(Lane):
        def _start_producer(self, diagnose: bool = False) -> Producer:
            started.append(self.run_id)
            return super()._start_producer(diagnose)

        def commit(self, producer: Producer, metadata: object, parts: list[Part]) -> None:
            if self.run_id == "older" and not stuck.is_set():
                stuck.set()
                unstick.wait(60)
                raise ProducerStuck("sending the positions did not return within 35s")
            super().commit(producer, metadata, parts)

    with NewestRun(flow) as newest:
        lanes.start("older", slot, ranges,
                    partial(Stuck, newest=newest, owner=Named("older")))  # type: ignore[arg-type]
        assert stuck.wait(60)
        name_newest(flow, "newest", "")
        reached, release = threading.Event(), threading.Event()
        held = pausing("commit", reached, release)
        lanes.start("newest", slot, ranges, type("Held", (held, Stuck), {}))
        assert reached.wait(60)

        # when: the older writer replaces its stuck producer, then the newest run goes on
        unstick.set()
        wait_until(lambda: "older" in lanes.rows, "the older run's lane finished")
        release.set()
        lanes.join_all()

    # then: the older writer started no producer again (it would have fenced the newest
    # run's writer): it left the slot to the newest run in one line, which copied every
    # record with the one producer it started; every record is on the target once
    assert started == ["older", "newest"]
    newest_copied_all(lanes, 500, flow, clusters, topic_name, older_yielded=True)

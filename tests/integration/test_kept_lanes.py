"""Kept lanes (the local copy runner in a continuous loop): a loop's writers run in its own
process, each slot's clients kept from cycle to cycle (its producer initialised once), with
the exactness of Spark's lanes: a writer another run fenced between two cycles stops and
is replaced, and a hung cycle's writers are left to it and fenced by the next cycle's."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest
from confluent_kafka import Consumer, Producer

from ferry.config import Flow
from ferry.core.job import Copied, run_summary
from ferry.core.lanes import by_writer, lanes_of
from ferry.core.plan_file import PlanFile
from ferry.core.tables import RangeOutcome
from ferry.kafka.lane import Lane
from ferry.runtime.kept_lanes import KeptLanes
from ferry.runtime.slots import name_newest, write_slots
from ferry.steps.plan import prepare
from tests.support.kafka_data import (
    assert_exact,
    create_topic,
    flow_config,
    grow_topic,
    pausing,
    produce,
)

pytestmark = [pytest.mark.integration]


def records(count: int, first: int = 0, partitions: int = 4
            ) -> list[tuple[bytes | None, bytes | None, int]]:
    return [(f"k{i}".encode(), f"v{i}".encode(), i % partitions)
            for i in range(first, first + count)]


def initialising(started: list[str]) -> type[Lane]:
    """A writer class that notes each producer it initialises (its transactional id)."""

    class Noting(Lane):
        def _start_producer(self, diagnose: bool = False) -> Producer:
            started.append(self.txn_id)
            return super()._start_producer(diagnose)

    return Noting


def cycle(flow: Flow, lanes: KeptLanes, run_id: str) -> list[dict[str, Any]]:
    """Plan the flow and copy the plan through `lanes`: the `runs` rows."""
    planned = prepare(flow, run_id=run_id)
    writers = by_writer(planned.plan.ranges, flow.ferry.writers)
    return lanes.copy(flow, run_id, writers, lanes_of(writers, planned.lanes), "",
                      topics=planned.plan_file().topics)


def kept_flow(clusters: dict[str, str], topic: str, tmp_path: Path
              ) -> tuple[Flow, KeptLanes, list[str]]:
    """400 records over four partitions, a flow of them with two writer slots, its kept
    lanes, and the list their writers note each producer they initialise in."""
    create_topic(clusters["source"], topic, 4)
    produce(clusters["source"], topic, records(400))
    flow = flow_config(tmp_path, clusters, topic, "ferry.writers = 2\n").enabled_flows[0]
    started: list[str] = []
    return flow, KeptLanes(flow, writer=initialising(started)), started


def outcomes(rows: list[dict[str, Any]]) -> set[str]:
    return {str(r["outcome"]) for r in rows}


def test_kept_writers_copy_cycle_after_cycle_with_each_producer_initialised_once(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a flow of four partitions over two writer slots, its lanes kept
    flow, lanes, started = kept_flow(clusters, topic_name, tmp_path)

    # when: three cycles, with new records before each of the later two
    try:
        first = cycle(flow, lanes, "first")
        produce(clusters["source"], topic_name, records(400, 400))
        second = cycle(flow, lanes, "second")
        produce(clusters["source"], topic_name, records(40, 800))
        third = cycle(flow, lanes, "third")
    finally:
        lanes.close()

    # then: every cycle copied, each slot's producer was initialised in the first cycle
    # only, and every record is on the target once
    assert outcomes(first) == outcomes(second) == outcomes(third) == {RangeOutcome.COPIED}
    assert sum(r["records"] for r in second) == 400
    assert len(started) == len(set(started)) == 2
    assert_exact(flow, clusters, topic_name, 4)


def test_a_kept_writer_another_run_fenced_between_cycles_stops_and_its_slot_is_taken_back(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a loop's cycle whose writers are kept, then another run of the flow (a CLI
    # run: new writers of the same slots, which fence the kept ones) copying newer records
    flow, lanes, started = kept_flow(clusters, topic_name, tmp_path)
    try:
        cycle(flow, lanes, "loop-1")
        produce(clusters["source"], topic_name, records(400, 400))
        other = prepare(flow, run_id="cli")
        name_newest(flow, "cli", "")
        slots = by_writer(other.plan.ranges, flow.ferry.writers)
        cli = write_slots(flow, "cli", sorted(slots.items()), "")
        assert outcomes(cli) == {RangeOutcome.COPIED}

        # when: the loop's next cycle, with records the other run did not copy
        produce(clusters["source"], topic_name, records(400, 800))
        after = cycle(flow, lanes, "loop-2")
    finally:
        lanes.close()

    # then: each kept writer found its id taken, and the loop (the newest run) took its
    # slot back with a new producer, which copied the rest: every record once
    assert outcomes(after) == {RangeOutcome.COPIED}
    assert sum(r["records"] for r in after) == 400
    assert sorted(Counter(started).values()) == [2, 2]  # each slot's id initialised twice
    assert_exact(flow, clusters, topic_name, 4)


def test_kept_writers_copy_a_source_topic_grown_since_their_clients_learnt_it(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a flow of one writer slot, whose first cycle copied three partitions and read
    # where the empty fourth ends: its kept producer and position reader learnt the remote
    # topic with four partitions
    create_topic(clusters["source"], topic_name, 4)
    produce(clusters["source"], topic_name, records(300, partitions=3))
    flow = flow_config(tmp_path, clusters, topic_name, "ferry.writers = 1\n").enabled_flows[0]
    started: list[str] = []
    lanes = KeptLanes(flow, writer=initialising(started))
    try:
        cycle(flow, lanes, "before")

        # when: the source topic grows to eight partitions, all but the last with new
        # records, and the next cycle's sync grows the remote topic. The kept clients
        # still hold the metadata of four: librdkafka asks again every five minutes, and
        # until then answers "Local: Unknown partition" for the new ones (the producer for
        # a record, the reader for the end of the empty one)
        grow_topic(clusters["source"], topic_name, 8)
        produce(clusters["source"], topic_name, records(700, 300, partitions=7))
        after = cycle(flow, lanes, "after")
    finally:
        lanes.close()

    # then: the cycle copied every partition with the kept producer (not failing the new
    # partitions as refused records, nor as a terminal error), and every record is on the
    # target once
    assert outcomes(after) == {RangeOutcome.COPIED}, after
    assert sum(r["records"] for r in after) == 700
    assert len(started) == 1
    assert_exact(flow, clusters, topic_name, 8)


class Counting(Lane):
    """A writer that notes the clients it makes, and the topics each new one learns."""

    made: ClassVar[Counter[str]]
    learnt: ClassVar[list[tuple[str, frozenset[str]]]]

    def _consumer(self) -> Consumer:
        self.made["consumer"] += 1
        return super()._consumer()

    def _target_reader(self) -> Consumer:
        self.made["reader"] += 1
        return super()._target_reader()

    def _new_consumer(self) -> Consumer:
        self.asked: list[set[str]] = []
        consumer = super()._new_consumer()
        self.learnt.append(("consumer", frozenset().union(*self.asked)))
        return consumer

    def _learn_topics(self, consumer: Consumer, topics: set[str]) -> None:
        getattr(self, "asked", []).append(set(topics))
        super()._learn_topics(consumer, topics)

    def _start_producer(self, diagnose: bool = False) -> Producer:
        self.made["producer"] += 1
        producer = super()._start_producer(diagnose)
        self.learnt.append(("producer", frozenset(self.learned)))
        return producer


def test_a_lanes_slots_share_its_consumer_and_reader_and_new_clients_learn_every_topic(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a flow of two topics over four writer slots run by two lanes, records in
    # one topic only
    busy, idle = f"{topic_name}-busy", f"{topic_name}-idle"
    for name in (busy, idle):
        create_topic(clusters["source"], name, 4)
    produce(clusters["source"], busy, records(400))
    flow = flow_config(tmp_path, clusters, f"{topic_name}-.*",
                       "ferry.writers = 4\ntasks.max = 2\n").enabled_flows[0]
    writer = type("Counted", (Counting,), {"made": Counter(), "learnt": []})
    lanes = KeptLanes(flow, writer=writer)

    # when: two cycles, new records before the second
    try:
        first = cycle(flow, lanes, "first")
        made = Counter(writer.made)
        produce(clusters["source"], busy, records(400, 400))
        second = cycle(flow, lanes, "second")
    finally:
        lanes.close()

    # then: each lane made one consumer and one reader for its two slots, each slot one
    # producer, none made again in the second cycle; every new client learnt both topics
    # (the producers their remote topics), the idle one too
    assert outcomes(first) == outcomes(second) == {RangeOutcome.COPIED}
    assert made == {"consumer": 2, "reader": 2, "producer": 4}
    assert writer.made == made
    assert len(writer.learnt) == 6
    for client, topics in writer.learnt:
        wanted = {busy, idle} if client == "consumer" else {
            flow.remote_topic(busy), flow.remote_topic(idle)}
        assert wanted <= topics, (client, topics)
    assert_exact(flow, clusters, busy, 4)


class KeptHere:
    """A copy runner (`ferry.steps.ports.CopyRunner`) running each plan through `lanes` in
    this process, as a continuous loop's local runner does; each copy's rows are kept."""

    def __init__(self, flow: Flow, lanes: KeptLanes) -> None:
        self.flow, self.lanes = flow, lanes
        self.rows: list[list[dict[str, Any]]] = []
        self.done = threading.Condition()

    reads_plan_file = False

    def run(self, plan: PlanFile, plan_path: str | None = None) -> Copied:
        writers = by_writer(plan.ranges, self.flow.ferry.writers)
        rows = self.lanes.copy(self.flow, plan.run_id, writers,
                               lanes_of(writers, plan.lanes), plan.role, plan.owner,
                               topics=plan.topics) if writers else []
        with self.done:
            self.rows.append(rows)
            self.done.notify_all()
        failed = any(r["outcome"] == RangeOutcome.FAILED for r in rows)
        return Copied(1 if failed else 0, run_summary(plan.run_id, rows, len(plan.gaps)))


def hung_cycle_flow(clusters: dict[str, str], topic_name: str, tmp_path: Path
                    ) -> tuple[Any, Any]:
    """(config, flow) of a one-partition topic holding 300 records, whose loop abandons a
    cycle after 15 s (a cycle with new writers took over 5 s under the suite's load, and was
    abandoned too)."""
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, records(300, partitions=1))
    config = flow_config(tmp_path, clusters, topic_name, "ferry.cycle.timeout.seconds = 15\n")
    return config, config.enabled_flows[0]


def test_a_hung_cycle_keeps_its_writers_and_the_next_cycle_fences_them_with_new_ones(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a continuous loop keeping its lanes, whose cycles may take 15 s (a cycle with
    # new writers took over 5 s under the suite's load, and was abandoned too), and a first
    # cycle whose writer hangs inside its first transaction (records sent, not committed)
    from ferry.steps.cycle import CycleResult, run_continuously

    config, flow = hung_cycle_flow(clusters, topic_name, tmp_path)
    held, release = threading.Event(), threading.Event()
    lanes = KeptLanes(flow, writer=pausing("commit", held, release))
    runner = KeptHere(flow, lanes)
    reported: list[CycleResult] = []

    # when: the loop runs until three cycles are reported; then the hung writer goes on
    try:
        run_continuously(config.path, config, flow, lambda result, _s: reported.append(result),
                         stop=lambda: len(reported) >= 3, runner=runner)
        assert held.is_set()
        release.set()
        with runner.done:
            assert runner.done.wait_for(lambda: len(runner.rows) >= 3, 60), \
                "the hung cycle's copy never ended"
    finally:
        release.set()
        lanes.close()

    # then: the hung cycle was abandoned and the next ones copied; the hung writer, fenced
    # by the next cycle's new one (the same writer id), stopped and left its ranges to the
    # newer run in one line, having committed nothing: every record is on the target once
    assert [r.abandoned for r in reported] == [True, False, False]
    assert all(r.ok for r in reported[1:])
    hung = runner.rows[-1]
    assert outcomes(hung) == {RangeOutcome.HANDED_OVER}
    newer = reported[1].run_id
    assert all(f"run {newer} of the flow started after this one" in r["error"]
               and "\n" not in r["error"] for r in hung), hung
    assert_exact(flow, clusters, topic_name, 1)


def test_an_abandoned_cycle_of_a_continuous_run_never_takes_its_slot_back_from_the_next(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a continuous run's loop (all its cycles name the same run the flow's newest)
    # keeping its lanes, whose first cycle's writer hangs inside its first transaction
    from ferry.core.takeover import Named
    from ferry.steps.cycle import CycleResult, run_continuously

    config, flow = hung_cycle_flow(clusters, topic_name, tmp_path)
    held, release = threading.Event(), threading.Event()
    started: list[str] = []

    class Hung(initialising(started)):  # type: ignore[misc, valid-type]
        def commit(self, producer: Producer, metadata: object, parts: list[Any]) -> None:
            if not held.is_set():
                held.set()
                release.wait(60)
            super().commit(producer, metadata, parts)  # type: ignore[arg-type]

    lanes = KeptLanes(flow, writer=Hung)
    runner = KeptHere(flow, lanes)
    owner = Named("continuous-run", 1_000)
    reported: list[CycleResult] = []

    # when: the loop abandons the hung cycle and its next cycle copies every record; then
    # the hung writer goes on (fenced), and the loop copies new records in a later cycle
    try:
        run_continuously(config.path, config, flow, lambda result, _s: reported.append(result),
                         stop=lambda: len(reported) >= 2, runner=runner, owner=owner)
        assert held.is_set()
        release.set()
        with runner.done:
            assert runner.done.wait_for(lambda: len(runner.rows) >= 2, 60), \
                "the hung cycle's copy never ended"
        produce(clusters["source"], topic_name, records(100, 300, partitions=1))
        run_continuously(config.path, config, flow, lambda result, _s: reported.append(result),
                         stop=lambda: len(reported) >= 3, runner=runner, owner=owner)
    finally:
        release.set()
        lanes.close()

    # then: the hung cycle started no producer again: it left its ranges to the next cycle
    # in one line (handed over, no failure); the live cycle's kept producer was never
    # fenced, so the later cycle copied with it (the slot's id initialised twice: by the
    # hung cycle and by the next); every record is on the target once
    assert [r.abandoned for r in reported] == [True, False, False]
    assert all(r.ok for r in reported[1:])
    hung = runner.rows[1]
    assert outcomes(hung) == {RangeOutcome.HANDED_OVER}, hung
    assert all(f"run {reported[1].run_id} of the flow started after this one" in r["error"]
               and "\n" not in r["error"] for r in hung), hung
    assert outcomes(runner.rows[-1]) == {RangeOutcome.COPIED}
    assert len(started) == 2, started
    assert_exact(flow, clusters, topic_name, 1)

"""The lane, the copy loop at Ferry's core, on an in-memory Kafka with transactions
(`fake_kafka`): what it writes, commits, skips and refuses, in milliseconds and without a
broker. The same behaviours on real brokers, with kills, faults and concurrent writers, are
in tests/integration (test_lane, test_exactness, test_rolling_bounce)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition as KTP

from ferry.config import Flow
from ferry.core.internal import (
    offset_map_topic,
    positions_group,
    reader_group,
    transactional_id,
)
from ferry.core.lanes import writer_of
from ferry.core.offsetmap import Segment, decode
from ferry.core.planner import Range
from ferry.core.positions import decode_position
from ferry.errors import TerminalError, TransientError
from ferry.kafka import delivery
from ferry.kafka.claim import ClaimLost
from ferry.kafka.kept import KeptClients
from ferry.kafka.lane import Lane
from ferry.kafka.lane_clients import LaneClients
from tests.unit.conftest import BASE, Loader
from tests.unit.kafka.fake_kafka import FakeClaim, FakeConsumer, FakeKafka, FakeProducer

TOPIC = "orders"


class Consumer(FakeConsumer):
    """A fake consumer that can be kept: unassigned, and closed."""

    closed = False

    def assignment(self) -> list[KTP]:
        return [KTP(topic, partition) for topic, partition in self.positions]

    def unassign(self) -> None:
        self.positions = {}
        self.at_eof.clear()

    def close(self) -> None:
        self.closed = True


class LaneOnFakes(Lane):
    """A lane whose clients are the fake clusters' (its logic is the real one's)."""

    def __init__(self, source: FakeKafka, target: FakeKafka, flow: Flow,
                 ranges: list[Range], run_id: str = "run-1",
                 clients: LaneClients | None = None) -> None:
        super().__init__(flow, ranges, run_id, clients=clients)
        self.source_cluster, self.target_cluster = source, target
        self.producers: list[FakeProducer] = []
        self.consumers: list[Consumer] = []
        """The consumers and readers it made."""

    def _producer(self, diagnose: bool = False) -> FakeProducer:  # type: ignore[override]
        producer = self.target_cluster.producer(self.txn_id)
        self.producers.append(producer)
        return producer

    def _consumer(self) -> Consumer:  # type: ignore[override]
        self.consumers.append(Consumer(self.source_cluster, reader_group(self.flow, "reader"),
                                       True))
        return self.consumers[-1]

    def _target_reader(self) -> Consumer:  # type: ignore[override]
        self.consumers.append(Consumer(self.target_cluster, positions_group(self.flow), True))
        return self.consumers[-1]


@pytest.fixture
def flow(load: Loader) -> Flow:
    return load(BASE + f"A->B.topics = {TOPIC}\nferry.transaction.max.records = 100\n"
                ).enabled_flows[0]


def clusters(flow: Flow, records: int, partitions: int = 1) -> tuple[FakeKafka, FakeKafka]:
    source, target = FakeKafka("A"), FakeKafka("B")
    source.create(TOPIC, partitions)
    target.create(flow.remote_topic(TOPIC), partitions)
    target.create(offset_map_topic(flow))
    for p in range(partitions):
        source.append(TOPIC, p, [(f"k{i}".encode(), f"v{p}-{i}".encode())
                                 for i in range(records)])
    return source, target


def entries(flow: Flow, target: FakeKafka) -> list:  # type: ignore[type-arg]
    return [decode(r.value) for r in target.committed_records(offset_map_topic(flow), 0)
            if r.value is not None]


def test_a_lane_copies_its_range_exactly_with_the_offset_map_and_position_in_its_transactions(
    flow: Flow
) -> None:
    source, target = clusters(flow, 250)
    result = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 250)]).run()

    copied = target.committed_records(flow.remote_topic(TOPIC), 0)
    original = source.committed_records(TOPIC, 0)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in copied] == \
        [(r.key, r.value, r.headers, r.timestamp) for r in original]
    # three transactions of at most 100 records, each with its own entry and position
    assert result.transactions == 3
    assert [(e.covered_start, e.covered_end) for e in entries(flow, target)] == \
        [(0, 100), (100, 200), (200, 250)]
    # the target offsets skip each transaction's marker
    assert [e.segments for e in entries(flow, target)] == \
        [(Segment(0, 0, 100),), (Segment(100, 101, 100),), (Segment(200, 202, 50),)]
    offset, metadata = target.groups[positions_group(flow)][(flow.remote_topic(TOPIC), 0)]
    position = decode_position(metadata)
    assert (offset, position.target_end) == (250, 252)
    assert position.owner == transactional_id(flow, writer_of(TOPIC, 0, flow.ferry.writers))
    assert [(r.outcome, r.records) for r in result.ranges] == [("copied", 250)]


def test_ranges_below_the_committed_position_are_skipped_and_the_rest_resumes_there(
    flow: Flow
) -> None:
    source, target = clusters(flow, 300)
    LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 150)]).run()

    again = LaneOnFakes(source, target, flow,
                        [Range(TOPIC, 0, 0, 150), Range(TOPIC, 0, 150, 300)], "run-2").run()

    assert [r.outcome for r in again.ranges] == ["skipped", "copied"]
    assert [r.value for r in target.committed_records(flow.remote_topic(TOPIC), 0)] == \
        [f"v0-{i}".encode() for i in range(300)]


def test_a_plan_that_expects_a_position_no_one_committed_copies_nothing(flow: Flow) -> None:
    source, target = clusters(flow, 100)
    with pytest.raises(TransientError, match="expects the position 50 committed"):
        LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 50, 100, expect=50)]).run()
    assert target.committed_records(flow.remote_topic(TOPIC), 0) == []
    assert target.end((flow.remote_topic(TOPIC), 0)) == 0


@pytest.mark.parametrize("chained", [False, True], ids=["read-by-the-plan", "an-earlier-chunk-end"])
def test_a_position_below_the_planned_one_is_left_as_written_unless_an_earlier_chunk_is_missing(
    flow: Flow, chained: bool
) -> None:
    # given: the partition committed at 50, and a plan from 100: read at 100 before a reset
    # moved it back to 50, or chained to an earlier chunk that ends at 100
    source, target = clusters(flow, 150)
    LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 50)]).run()
    planned = Range(TOPIC, 0, 100, 150, expect=100, chained=chained)

    if chained:  # then: the chunk fails for a re-plan, copying nothing
        with pytest.raises(TerminalError, match="committed at 50 but the plan starts at 100"):
            LaneOnFakes(source, target, flow, [planned], "chunk-2").run()
    else:  # then: the partition is handed over, copying nothing, for the next plan
        result = LaneOnFakes(source, target, flow, [planned], "run-2").run()
        assert [r.outcome for r in result.ranges] == ["handed-over"]
        assert "moved back to 50" in (result.ranges[0].error or "")
    assert len(target.committed_records(flow.remote_topic(TOPIC), 0)) == 50
    assert target.groups[positions_group(flow)][(flow.remote_topic(TOPIC), 0)][0] == 50


def test_a_record_the_target_refuses_fails_the_lane_naming_it_and_its_batch_is_never_visible(
    flow: Flow
) -> None:
    source, target = clusters(flow, 60)
    target.refuse(flow.remote_topic(TOPIC), b"v0-42")

    lane = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 60)])
    with pytest.raises(TerminalError, match="offset 42"):
        lane.run()

    # the batch was aborted, re-run one record per request to name the refusal, aborted again
    assert target.committed_records(flow.remote_topic(TOPIC), 0) == []
    assert entries(flow, target) == []
    assert positions_group(flow) not in target.groups
    assert [r.outcome for r in lane.results] == ["failed"]


def test_a_refusal_whose_abort_times_out_on_a_loaded_target_still_names_the_refused_record(
    flow: Flow
) -> None:
    # given: a refused record, and the target slow to answer the aborts that follow it (a
    # message still outstanding when each abort's time is up: librdkafka's abort may be
    # called again)
    source, target = clusters(flow, 60)
    target.refuse(flow.remote_topic(TOPIC), b"v0-42")
    target.slow_aborts = 2

    lane = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 60)])
    with pytest.raises(TerminalError, match="offset 42"):
        lane.run()

    assert target.slow_aborts == 0
    assert target.committed_records(flow.remote_topic(TOPIC), 0) == []
    assert [r.outcome for r in lane.results] == ["failed"]


def test_records_the_target_leaves_unacknowledged_for_a_while_are_copied_again_exactly_once(
    flow: Flow
) -> None:
    # given: a remote partition whose records time out in the next two transactions (no
    # leader, too few in-sync replicas: the cluster does not answer, it refuses nothing)
    source, target = clusters(flow, 150)
    target.silence(flow.remote_topic(TOPIC), transactions=2)

    lane = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 150)])
    result = lane.run()

    # then: each timed-out batch was aborted and copied again by a new producer of the id,
    # until the cluster took it; every record is there once, in order, with its entries
    assert len(lane.producers) == 3
    assert [r.value for r in target.committed_records(flow.remote_topic(TOPIC), 0)] == \
        [f"v0-{i}".encode() for i in range(150)]
    assert [(e.covered_start, e.covered_end) for e in entries(flow, target)] == \
        [(0, 100), (100, 150)]
    assert [(r.outcome, r.records) for r in result.ranges] == [("copied", 150)]


def test_records_the_target_never_acknowledges_fail_the_lane_as_transient_after_the_budget(
    load: Loader
) -> None:
    flow = load(BASE + f"A->B.topics = {TOPIC}\nferry.kafka.retry.seconds = 1\n"
                ).enabled_flows[0]
    source, target = clusters(flow, 60)
    target.silence(flow.remote_topic(TOPIC), transactions=1_000)

    lane = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 60)])
    with pytest.raises(TransientError) as failed:
        lane.run()

    message = str(failed.value)
    assert f"cluster B did not acknowledge the record of {TOPIC}-0 at source offset 0" in message
    assert "Message timed out" in message and "ferry.kafka.retry.seconds=1" in message
    assert "min.insync.replicas" in message
    assert len(lane.producers) > 2  # waited out with new producers, not failed at once
    assert target.committed_records(flow.remote_topic(TOPIC), 0) == []
    assert positions_group(flow) not in target.groups


def test_a_newer_writer_of_the_slot_fences_the_lane_and_its_open_transaction_is_aborted(
    flow: Flow
) -> None:
    source, target = clusters(flow, 250)
    lane = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 250)])
    commit = lane.commit
    batches = []

    def commit_then_lose_the_id(*args: object) -> None:
        batches.append(1)
        if len(batches) == 2:  # a newer run initialises the same id mid-batch
            target.fence(lane.txn_id)
        commit(*args)  # type: ignore[arg-type]

    lane.commit = commit_then_lose_the_id  # type: ignore[method-assign]
    with pytest.raises(TransientError, match="was taken by a newer writer"):
        lane.run()

    # the first batch stays, the second (open when fenced) is never visible
    assert [r.value for r in target.committed_records(flow.remote_topic(TOPIC), 0)] == \
        [f"v0-{i}".encode() for i in range(100)]
    offset, _ = target.groups[positions_group(flow)][(flow.remote_topic(TOPIC), 0)]
    assert offset == 100


def test_partitions_of_one_slot_commit_together_each_with_its_own_entry(load: Loader) -> None:
    flow = load(BASE + f"A->B.topics = {TOPIC}\nferry.writers = 1\n").enabled_flows[0]
    source, target = clusters(flow, 40, partitions=3)
    result = LaneOnFakes(source, target, flow,
                         [Range(TOPIC, p, 0, 40) for p in range(3)]).run()

    assert result.transactions == 1
    assert sorted((e.source_partition, e.covered_end) for e in entries(flow, target)) == \
        [(0, 40), (1, 40), (2, 40)]
    for p in range(3):
        assert [r.value for r in target.committed_records(flow.remote_topic(TOPIC), p)] == \
            [f"v{p}-{i}".encode() for i in range(40)]


@pytest.mark.parametrize(("mode", "commits"), [
    ("exactly_once", [1_000] * 5),  # in one transaction
    ("at_least_once", [1_000] * 10),  # the start positions first, then the batch's
])
def test_a_batch_over_more_partitions_than_one_commit_takes_commits_their_positions_in_parts(
    load: Loader, monkeypatch: pytest.MonkeyPatch, mode: str, commits: list[int]
) -> None:
    # the first batch of one writer slot over 5,000 partitions: one commit of all their
    # positions is refused whole by the group coordinator (over 1 MB)
    flow = load(BASE + f"A->B.topics = {TOPIC}\nferry.writers = 1\nferry.delivery = {mode}\n"
                ).enabled_flows[0]
    source, target = clusters(flow, 1, partitions=5_000)
    claims_on(target, monkeypatch)

    result = LaneOnFakes(source, target, flow,
                         [Range(TOPIC, p, 0, 1) for p in range(5_000)]).run()

    assert result.transactions == 1
    assert target.commits == commits
    assert {offset for offset, _ in target.groups[positions_group(flow)].values()} == {1}
    assert len(target.groups[positions_group(flow)]) == 5_000


# -- at_least_once: targets without transactions (Event Hubs Standard) ---------------------

@pytest.fixture
def plain_flow(load: Loader) -> Flow:
    return load(BASE + f"A->B.topics = {TOPIC}\nferry.delivery = at_least_once\n"
                "ferry.transaction.max.records = 100\n").enabled_flows[0]


def claims_on(target: FakeKafka, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer slots are claimed on the fake target, as WriterClaim claims them in Kafka."""
    monkeypatch.setattr(delivery, "WriterClaim", lambda flow, txn_id: FakeClaim(target, txn_id))


def test_at_least_once_copies_exactly_with_plain_commits_after_each_batch(
    plain_flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = clusters(plain_flow, 250)
    claims_on(target, monkeypatch)
    result = LaneOnFakes(source, target, plain_flow, [Range(TOPIC, 0, 0, 250)]).run()

    assert [r.value for r in target.committed_records(plain_flow.remote_topic(TOPIC), 0)] == \
        [f"v0-{i}".encode() for i in range(250)]
    assert target.txns == []  # no transaction at all
    # no markers: each batch's records follow the last one's on the target
    assert [e.segments for e in entries(plain_flow, target)] == \
        [(Segment(0, 0, 100),), (Segment(100, 100, 100),), (Segment(200, 200, 50),)]
    offset, metadata = target.groups[positions_group(plain_flow)][
        (plain_flow.remote_topic(TOPIC), 0)]
    assert (offset, decode_position(metadata).target_end) == (250, 250)
    assert [(r.outcome, r.duplicates) for r in result.ranges] == [("copied", 0)]


def test_at_least_once_keeps_what_was_acknowledged_before_a_refused_record(
    plain_flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = clusters(plain_flow, 60)
    claims_on(target, monkeypatch)
    target.refuse(plain_flow.remote_topic(TOPIC), b"v0-42")

    with pytest.raises(TerminalError, match="offset 42"):
        LaneOnFakes(source, target, plain_flow, [Range(TOPIC, 0, 0, 60)]).run()

    # records 0..41 stay, with their entry and the position at the refused record
    kept = target.committed_records(plain_flow.remote_topic(TOPIC), 0)
    assert [r.value for r in kept][:42] == [f"v0-{i}".encode() for i in range(42)]
    assert [(e.covered_start, e.covered_end) for e in entries(plain_flow, target)
            if e.records] == [(0, 42)]
    offset, _ = target.groups[positions_group(plain_flow)][(plain_flow.remote_topic(TOPIC), 0)]
    assert offset == 42


def test_at_least_once_counts_what_a_crashed_run_wrote_past_its_position_as_duplicates(
    plain_flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = clusters(plain_flow, 150)
    claims_on(target, monkeypatch)
    LaneOnFakes(source, target, plain_flow, [Range(TOPIC, 0, 0, 100)]).run()
    # a run that crashed after writing 30 records it never committed a position for
    target.append(plain_flow.remote_topic(TOPIC), 0,
                  [(f"k{i}".encode(), f"v0-{i}".encode()) for i in range(100, 130)])

    again = LaneOnFakes(source, target, plain_flow, [Range(TOPIC, 0, 100, 150, expect=100)],
                        "run-2").run()

    assert [(r.outcome, r.duplicates) for r in again.ranges] == [("copied", 30)]
    values = [r.value for r in target.committed_records(plain_flow.remote_topic(TOPIC), 0)]
    assert values == [f"v0-{i}".encode() for i in range(130)] + \
        [f"v0-{i}".encode() for i in range(100, 150)]


def test_an_at_least_once_writer_whose_slot_a_newer_writer_took_commits_no_more_positions(
    plain_flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = clusters(plain_flow, 250)
    claims_on(target, monkeypatch)
    lane = LaneOnFakes(source, target, plain_flow, [Range(TOPIC, 0, 0, 250)])
    commit = lane.commit
    batches = []

    def commit_then_lose_the_slot(*args: object) -> None:
        batches.append(1)
        if len(batches) == 2:  # a newer writer claims the slot during the second batch
            FakeClaim(target, lane.txn_id).take()
        commit(*args)  # type: ignore[arg-type]

    lane.commit = commit_then_lose_the_slot  # type: ignore[method-assign]
    with pytest.raises(ClaimLost, match="taken by a newer writer"):
        lane.run()

    offset, _ = target.groups[positions_group(plain_flow)][(plain_flow.remote_topic(TOPIC), 0)]
    assert offset == 100  # the first batch's position, not the second's


def test_a_lane_whose_offset_map_topic_is_gone_fails_at_once_and_writes_nothing(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the flow's offset-map topic deleted since the cycle planned
    from ferry.kafka import lane_topics

    monkeypatch.setattr(lane_topics, "MAP_TOPIC_WAIT_S", 0.6)
    source, target = clusters(flow, 50)
    del target.logs[(offset_map_topic(flow), 0)]

    # when / then: refused before any record, naming the topic and the way on
    with pytest.raises(TerminalError, match=r"offset-map topic \S+ is not on cluster B.*"
                                            r"nothing was copied.*creates it again"):
        LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 50)]).run()
    assert target.committed_records(flow.remote_topic(TOPIC), 0) == []


def test_an_offset_map_topic_a_broker_learns_of_a_moment_later_is_waited_for(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a map topic the plan just created, unknown to the lane's broker at first
    source, target = clusters(flow, 50)
    key = (offset_map_topic(flow), 0)
    log = target.logs.pop(key)
    metadata, asked = target.metadata, []

    def learning(topic: str | None) -> object:
        asked.append(topic)
        if len(asked) > 2:
            target.logs.setdefault(key, log)
        return metadata(topic)

    monkeypatch.setattr(target, "metadata", learning)

    # when / then: the lane copies once the topic is known
    assert LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 50)]).run().records == 50


def test_a_producer_stuck_committing_positions_is_replaced_and_its_batch_copied_again(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a lane whose first producer, at its second commit, never returns from
    # send_offsets_to_transaction (librdkafka after its coordinator's node left the
    # metadata: kafka/stuck.py), with the bound shortened
    import threading

    from ferry.kafka import stuck

    monkeypatch.setattr(stuck, "SEND_OFFSETS_S", 0.2)
    monkeypatch.setattr(stuck, "GRACE_S", 0.1)
    source, target = clusters(flow, 250)
    lane = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 250)])
    never = threading.Event()
    make = lane._producer

    def first_one_sticks(diagnose: bool = False) -> FakeProducer:
        producer = make(diagnose)
        if len(lane.producers) == 1:
            send, calls = producer.send_offsets_to_transaction, []

            def stuck_on_the_second(*args: Any, **kwargs: Any) -> None:
                calls.append(1)
                if len(calls) == 2:
                    never.wait(10)
                send(*args, **kwargs)

            producer.send_offsets_to_transaction = stuck_on_the_second  # type: ignore[method-assign]
        return producer

    lane._producer = first_one_sticks  # type: ignore[method-assign]

    # when: it runs
    try:
        result = lane.run()
    finally:
        never.set()  # the abandoned call returns (fenced) and its thread ends

    # then: a second producer of the same id took over, the stuck batch was copied again,
    # and every record is on the target once, in order
    assert lane.replaced == 1 and len(lane.producers) == 2
    assert [r.value for r in target.committed_records(flow.remote_topic(TOPIC), 0)] == \
        [f"v0-{i}".encode() for i in range(250)]
    assert [(r.outcome, r.records) for r in result.ranges] == [("copied", 250)]


@pytest.mark.parametrize("lands", ["at-commit", "mid-positions"])
def test_a_refused_start_marker_fails_naming_the_refusal_whichever_call_learns_of_it(
    flow: Flow, lands: str
) -> None:
    # given: an empty source partition (its first cycle records only where copying starts,
    # in a transaction of offset-map entries alone) and an offset-map topic that refuses
    # every entry; the refusal reaching the producer when the transaction commits, or while
    # its positions are in flight (librdkafka's error then reads "Erroneous state", naming
    # nothing: a CI run on real brokers saw it)
    source, target = clusters(flow, 0)
    target.refuse_topic(offset_map_topic(flow))
    target.refusals_land_mid_positions = lands == "mid-positions"

    # when / then: a Ferry error a retry may clear, naming the step, the partition, the
    # offset-map topic and the broker's refusal; no position committed
    with pytest.raises(TransientError) as err:
        LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 0)]).run()
    message = str(err.value)
    assert (f"recording the start positions of {TOPIC}-0 in {offset_map_topic(flow)} failed"
            in message)
    assert "message size too large" in message.lower()
    assert positions_group(flow) not in target.groups


def test_a_writer_with_new_clients_closes_its_consumer_and_reader_at_the_end(flow: Flow) -> None:
    source, target = clusters(flow, 50)
    lane = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 50)])
    lane.run()
    assert len(lane.consumers) == 2 and all(c.closed for c in lane.consumers)


def kept_of(flow: Flow) -> KeptClients:
    """The kept clients of the writer slot of the topic's partition 0."""
    slot = writer_of(TOPIC, 0, flow.ferry.writers)
    return KeptClients(transactional_id(flow, slot), flow=flow.name, slot=slot)


def test_a_kept_writer_starts_from_the_clients_the_slots_last_writer_left(flow: Flow) -> None:
    # given: a slot's writer of one cycle that copied its range with kept clients
    source, target = clusters(flow, 150)
    kept = kept_of(flow)
    first = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 100)], "cycle-1",
                        clients=kept)
    first.run()

    # when: the slot's writer of the next cycle copies the next range
    second = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 100, 150, expect=100)],
                         "cycle-2", clients=kept)
    result = second.run()

    # then: it made no client and initialised no producer, and the copy is exact
    assert (len(first.producers), len(first.consumers)) == (1, 2)
    assert (second.producers, second.consumers) == ([], [])
    assert not any(c.closed for c in first.consumers)
    assert [r.value for r in target.committed_records(flow.remote_topic(TOPIC), 0)] == \
        [f"v0-{i}".encode() for i in range(150)]
    assert [(r.outcome, r.records) for r in result.ranges] == [("copied", 50)]


def test_a_kept_writer_whose_run_failed_drops_its_clients_for_the_next_to_make_new_ones(
    flow: Flow
) -> None:
    # given: a slot's kept writer that fails on a record the target refuses
    source, target = clusters(flow, 60)
    kept = kept_of(flow)
    target.refuse(flow.remote_topic(TOPIC), b"v0-42")
    failed = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 60)], "cycle-1",
                         clients=kept)
    with pytest.raises(TerminalError, match="offset 42"):
        failed.run()

    # when: the next cycle's writer of the slot runs (the record taken by now)
    target.refusals.clear()
    again = LaneOnFakes(source, target, flow, [Range(TOPIC, 0, 0, 60)], "cycle-2",
                        clients=kept)
    again.run()

    # then: the failed writer's clients were closed, and the next one made its own
    assert all(c.closed for c in failed.consumers)
    assert (len(again.producers), len(again.consumers)) == (1, 2)
    assert [r.value for r in target.committed_records(flow.remote_topic(TOPIC), 0)] == \
        [f"v0-{i}".encode() for i in range(60)]


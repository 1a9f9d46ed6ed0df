"""What keeps the copy exact beyond a fresh run, on real brokers: one writer per partition
whatever the lane count or role (G11), ranges that expect their position, stalls named,
offset-map entries that never outgrow the broker's record limit."""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition

from ferry.config import Flow, load_config
from ferry.core.internal import offset_map_topic
from ferry.core.lanes import by_writer, writer_of
from ferry.core.offsetmap import MAX_ENTRY_SEGMENTS, decode
from ferry.core.planner import Range
from ferry.errors import FerryError, TransientError
from ferry.kafka import lane as lane_module
from ferry.kafka.admin import Admin
from ferry.kafka.lane import Lane
from ferry.kafka.topology import ensure_offset_map_topic
from ferry.steps.plan import prepare
from tests.support.kafka_data import (
    COMPACTION_EXCLUDE,
    assert_exact,
    conf,
    create_topic,
    flow_config,
    in_thread,
    paused_writer,
    produce,
    read_all,
    stable_and_end,
)

pytestmark = pytest.mark.integration




def records(count: int, first: int = 0) -> list[tuple[bytes | None, bytes | None, int]]:
    return [(f"k{i}".encode(), f"v{i}".encode(), 0) for i in range(first, first + count)]


@pytest.mark.parametrize(("at", "delivery"), [
    ("positions", "exactly_once"), ("commit", "exactly_once"), ("positions", "at_least_once")],
    ids=["after-reading-its-positions", "inside-its-first-transaction",
         "at-least-once-after-reading-its-positions"])
def test_two_runs_of_a_flow_with_different_lane_counts_never_both_write_a_partition(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, at: str, delivery: str
) -> None:
    # given: one flow run with tasks.max=2 (a scheduled run on Spark Connect) and one with
    # tasks.max=8 (an operator's `ferry mirror` on local[8]); the first has taken its
    # writer id (at_least_once: claimed its slot) and stops at `at`
    create_topic(clusters["source"], topic_name, 8)  # records in partition 0 only
    produce(clusters["source"], topic_name, records(300))
    first_flow = flow_config(tmp_path, clusters, topic_name,
                             f"tasks.max = 2\nferry.delivery = {delivery}\n").enabled_flows[0]
    eight = tmp_path / "eight.properties"
    eight.write_text((tmp_path / "mm2.properties").read_text().replace("tasks.max = 2",
                                                                       "tasks.max = 8"))
    second_flow = load_config(eight).flow(first_flow.name)
    first_plan = prepare(first_flow, run_id="two-lanes")
    slot = writer_of(topic_name, 0, first_flow.ferry.writers)
    mine = by_writer(first_plan.plan.ranges, first_flow.ferry.writers)[slot]
    first, _, release, failure = paused_writer(first_flow, mine, "two-lanes", at)

    # when: the other run plans and copies the same partition meanwhile, then the first
    # goes on
    second_plan = prepare(second_flow, run_id="eight-lanes")
    assert second_plan.lanes != first_plan.lanes
    theirs = by_writer(second_plan.plan.ranges, second_flow.ferry.writers)[slot]
    second = Lane(second_flow, theirs, "eight-lanes")
    assert second.txn_id == first.txn_id  # the writer id ignores the lane count
    assert second.run().records == 300
    release.set()
    first.thread.join(60)  # type: ignore[attr-defined]

    # then: the first run stopped with one line saying why, and every record is on the
    # target once
    assert len(failure) == 1 and "was taken by a newer writer" in str(failure[0])
    assert "\n" not in str(failure[0])
    assert_exact(first_flow, clusters, topic_name, 8)


def test_an_at_least_once_writer_replaced_mid_run_commits_no_position_and_stops(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a target without transactions; a run has committed its first batch of 100 and
    # stops with its second batch sent, before committing it
    from ferry.core.internal import positions_group

    monkeypatch.setattr(lane_module, "BATCH", 100)  # a batch ends at one read's 100 records

    flow = one_partition_flow(clusters, topic_name, tmp_path, 300,
                              "ferry.delivery = at_least_once\n"
                              "ferry.transaction.max.records = 100\n")
    planned = prepare(flow, run_id="first")
    first, _, release, failure = paused_writer(flow, planned.plan.ranges, "first",
                                               "second-commit")

    # when: another run of the flow copies the rest meanwhile, then the first goes on
    from tests.support.kafka_data import run_cycle

    assert run_cycle(flow, "second") == 200
    release.set()
    first.thread.join(60)  # type: ignore[attr-defined]

    # then: the first stopped with one line before committing a position over the second's
    # (which would move it back to 200 and copy 200-299 a third time); the only records on
    # the target twice are the batch it had sent; the next run copies nothing
    assert len(failure) == 1 and "was taken by a newer writer" in str(failure[0])
    assert "\n" not in str(failure[0])
    remote = flow.remote_topic(topic_name)
    position = Admin(flow.target_admin).group_offsets(positions_group(flow), [(remote, 0)])
    assert position == {(remote, 0): 300}
    target = [r.content() for r in read_all(clusters["target"], remote, 0)]
    source = [r.content() for r in read_all(clusters["source"], topic_name, 0)]
    assert len(target) == 400 and sorted(set(target)) == sorted(source)
    assert run_cycle(flow, "third") == 0


def test_an_at_least_once_positions_reset_stops_a_running_writer_before_its_next_commit(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a target without transactions and a run stopped after reading its positions
    from ferry.core.internal import positions_group
    from ferry.steps import positions

    flow = one_partition_flow(clusters, topic_name, tmp_path, 300,
                              "ferry.delivery = at_least_once\n")
    planned = prepare(flow, run_id="running")
    first, _, release, failure = paused_writer(flow, planned.plan.ranges, "running",
                                               "positions")

    # when: the operator resets the flow's position meanwhile, then the run goes on
    positions.reset(flow, topic_name, "200")
    release.set()
    first.thread.join(60)  # type: ignore[attr-defined]

    # then: the reset holds: the run stopped before sending anything over it
    assert len(failure) == 1 and "was taken by a newer writer" in str(failure[0])
    remote = flow.remote_topic(topic_name)
    assert Admin(flow.target_admin).group_offsets(positions_group(flow), [(remote, 0)]) == {
        (remote, 0): 200}
    assert read_all(clusters["target"], remote, 0) == []


def test_a_writer_of_an_id_from_before_writer_slots_is_fenced_before_its_partition_is_written(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a partition last committed under a lane id of an older release (lane 0 of 1),
    # and a zombie of that id with records in an open transaction
    flow = one_partition_flow(clusters, topic_name, tmp_path, 100)
    prepared = prepare(flow, run_id="first")
    legacy = f"ferry.{flow.source}->{flow.target}.lane-0-of-1"
    old = Lane(flow, prepared.plan.ranges, "first")
    old.txn_id = legacy
    old.run()
    remote = flow.remote_topic(topic_name)
    zombie = Producer(conf(clusters["target"], **{"transactional.id": legacy}))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(10):
        zombie.produce(remote, value=f"zombie-{i}".encode(), partition=0)
    zombie.flush(30)

    # when: the next run copies the partition under its writer slot's id
    produce(clusters["source"], topic_name, records(20, 100))
    prepared = prepare(flow, run_id="second")
    Lane(flow, prepared.plan.ranges, "second").run()

    # then: the zombie was fenced (its commit fails, its records are aborted) and every
    # source record is on the target exactly once
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    assert_exact(flow, clusters, topic_name, 1)


def test_a_backfill_chunk_run_before_the_chunk_it_follows_copies_nothing(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a backfill into a topic of its own, in two chunks of 100 offsets
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, records(200))
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    destination = f"investigation.{topic_name}"
    create_topic(clusters["target"], destination, 1)
    ensure_offset_map_topic(flow, Admin(flow.target_admin))
    first = Range(topic_name, 0, 0, 100, None, destination, expect=None)
    second = Range(topic_name, 0, 100, 200, None, destination, expect=100)

    # when: the second chunk runs first (the first failed before its first commit)
    with pytest.raises(TransientError, match="expects the position 100"):
        Lane(flow, [second], "chunk-2", role="backfill").run()

    # then: nothing was written, and in order the chunks leave no hole
    assert read_all(clusters["target"], destination, 0) == []
    Lane(flow, [first], "chunk-1", role="backfill").run()
    Lane(flow, [second], "chunk-2", role="backfill").run()
    source = read_all(clusters["source"], topic_name, 0)
    assert [r.content() for r in read_all(clusters["target"], destination, 0)] == \
        [r.content() for r in source]


def test_a_partition_that_never_moves_fails_the_lane_naming_it_despite_empty_commits(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given: transactions of 1 s, a stall limit of 4 s, and a partition that cannot reach
    # its range's end (what an offline leader looks like to the lane)
    monkeypatch.setattr(lane_module, "STALL_S", 4.0)
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, records(5))
    flow = flow_config(tmp_path, clusters, topic_name,
                       "ferry.transaction.max.seconds = 1\n").enabled_flows[0]
    prepare(flow, run_id="topology")  # creates the remote and offset-map topics
    stuck = Lane(flow, [Range(topic_name, 0, 0, 10, expect=None)], "stuck")

    # when
    started = time.monotonic()
    worker, failure = in_thread(stuck)
    worker.join(timeout=40)

    # then: it failed within the stall limit (plus a transaction), naming partition and offset
    assert not worker.is_alive(), "the lane spins forever in empty transactions"
    assert time.monotonic() - started < 30
    assert len(failure) == 1 and isinstance(failure[0], TransientError)
    assert f"{topic_name}-0 at 5 of 10" in str(failure[0])
    # and the failed lane aborted its open transaction: the remote partition's last stable
    # offset is not held back until the broker's transaction timeout
    stable, end = stable_and_end(clusters["target"],
                                 TopicPartition(flow.remote_topic(topic_name), 0))
    assert stable == end > 0


def test_a_transaction_of_sixty_thousand_segments_writes_entries_below_the_record_limit(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a compacted source where every kept record is followed by a hole, so one
    # transaction's records break into one segment each (one entry would be > 1 MB)
    create_topic(clusters["source"], topic_name, 1, {
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0"})
    for round_ in range(6):  # segments roll by time: all but the last get compacted
        time.sleep(0.3)
        produce(clusters["source"], topic_name,
                [((f"dup-{i % 10}" if i % 2 == 0 else f"u{round_}-{i}").encode(), b"v", 0)
                 for i in range(24_000)], headers=False)
    deadline = time.monotonic() + 120
    while len(read_all(clusters["source"], topic_name, 0)) > 80_000:
        assert time.monotonic() < deadline, "the log cleaner never compacted the topic"
        time.sleep(1)
    flow = flow_config(tmp_path, clusters, topic_name, COMPACTION_EXCLUDE).enabled_flows[0]

    # when
    prepared = prepare(flow, run_id="big")
    Lane(flow, prepared.plan.ranges, "big").run()

    # then: exact, and the transaction's entry came in pieces of bounded size
    assert_exact(flow, clusters, topic_name, 1)
    entries = [decode(r.value) for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    assert len(entries) > 1
    assert max(len(e.segments) for e in entries) <= MAX_ENTRY_SEGMENTS
    assert sum(len(e.segments) for e in entries) > 60_000


def test_a_backfill_beside_scheduled_cycles_doubles_nothing_and_never_moves_a_position_back(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a stream into the source, scheduled cycles copying it back to back, and
    # backfills of the flow's own remote topic from the flow's position, all at once
    import json

    from ferry.core.internal import positions_group
    from ferry.steps.backfill import BackfillRequest, prepare_backfill
    from tests.support.kafka_data import run_cycle

    # one partition: a backfill from the flow's position is then one window, not refused
    # because another partition stands elsewhere
    create_topic(clusters["source"], topic_name, 1)
    flow = flow_config(tmp_path, clusters, topic_name,
                       "ferry.transaction.max.seconds = 0.3\n").enabled_flows[0]
    run_cycle(flow, "start")
    remote = flow.remote_topic(topic_name)
    stop = threading.Event()
    copied = {"scheduled": 0, "backfill": 0, "fenced or refused": 0}
    moved_back: list[str] = []
    errors: list[BaseException] = []

    def stream() -> None:
        n = 0
        while not stop.is_set():
            produce(clusters["source"], topic_name,
                    [(None, f"r{n + i}".encode(), 0) for i in range(400)])
            n += 400
            time.sleep(0.05)

    # The backfill's plan-time check passes only while no cycle moves the position: the
    # scheduled loop pauses for each backfill's planning, then both copy at once (the case
    # a look at plan time cannot exclude).
    between_cycles = threading.Lock()
    rounds = [0]  # backfills planned so far

    def scheduled() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            with between_cycles:
                try:
                    copied["scheduled"] += run_cycle(flow, f"cycle-{n}")
                except FerryError:
                    copied["fenced or refused"] += 1
            time.sleep(0.01)

    def backfills() -> None:
        admin = Admin(flow.target_admin)
        # How long after its planning a backfill starts copying: from at once (the cycle
        # it let through is still planning) to after that cycle's lane may have finished,
        # so the interleavings stay covered however fast a cycle is.
        delays = itertools.cycle((0.0, 0.05, 0.1, 0.3))
        n = 0
        while not stop.is_set():
            n += 1
            rounds[0] = n
            with between_cycles:
                try:
                    position = admin.group_offsets(positions_group(flow), [(remote, 0)]).get(
                        (remote, 0))
                    run = prepare_backfill(flow, BackfillRequest(
                        topics=topic_name, start=str(position), chunk_records=5_000),
                        f"bf-{n}")
                except FerryError:
                    copied["fenced or refused"] += 1
                    continue
            time.sleep(next(delays))  # a scheduled cycle is under way again
            try:
                for path in run.chunk_files:
                    chunk = json.loads(Path(path).read_text())
                    ranges = [Range(**r) for r in chunk["ranges"]]
                    for mine in by_writer(ranges, flow.ferry.writers).values():
                        copied["backfill"] += Lane(flow, mine, chunk["run_id"],
                                                   role=chunk["role"]).run().records
            except FerryError:
                copied["fenced or refused"] += 1

    def watch() -> None:
        admin = Admin(flow.target_admin)
        last: dict[int, int] = {}
        while not stop.is_set():
            found = admin.group_offsets(positions_group(flow), [(remote, 0)])
            for (_, partition), offset in found.items():
                if offset < last.get(partition, -1):
                    moved_back.append(f"{partition}: {last[partition]} -> {offset}")
                last[partition] = offset
            time.sleep(0.02)

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # surfaced below, not lost in the thread
                errors.append(exc)
        return run

    # when
    threads = [threading.Thread(target=guarded(w), daemon=True)
               for w in (stream, scheduled, backfills, watch)]
    for thread in threads:
        thread.start()
    # until every delay was tried twice and both kinds of writer copied (25 s at most)
    deadline = time.monotonic() + 25
    while (rounds[0] < 8 or min(copied["scheduled"], copied["backfill"]) == 0) \
            and time.monotonic() < deadline and not errors:
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, "".join(
        line for exc in errors for line in traceback.format_exception(exc))
    while run_cycle(flow, "catch-up"):  # the stream has stopped: copy what is left
        pass

    # then: both kinds of writers committed, and still every record is there once
    assert copied["scheduled"] > 0 and copied["backfill"] > 0, copied
    assert moved_back == []
    assert_exact(flow, clusters, topic_name, 1)


def test_a_lane_that_fails_mid_transaction_aborts_it_at_once(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: one long transaction, and another writer putting records into the remote
    # partition meanwhile, so that the lane's records are not contiguous there (it refuses
    # to map around a foreign writer: the lane fails with its transaction open)
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, records(50_000))
    flow = flow_config(tmp_path, clusters, topic_name,
                       "ferry.transaction.max.seconds = 60\n"
                       "ferry.transaction.max.records = 1000000\n").enabled_flows[0]
    prepare(flow, run_id="topology")  # creates the remote and offset-map topics
    remote = flow.remote_topic(topic_name)
    stop, writing = threading.Event(), threading.Event()

    def intrude() -> None:
        writer = Producer(conf(clusters["target"]))
        while not stop.is_set():
            writer.produce(remote, b"foreign", partition=0)
            writer.flush(5)
            writing.set()
            time.sleep(0.005)

    intruder = threading.Thread(target=intrude, daemon=True)
    intruder.start()
    # writing before the lane starts, and on throughout its copy: on a loaded machine the
    # intruder's first record once came after the lane's last, and the lane rightly failed
    # nothing
    assert writing.wait(30), "the other writer wrote nothing"
    try:
        lane = Lane(flow, [Range(topic_name, 0, 0, 50_000, expect=None)], "mixed")
        with pytest.raises(FerryError, match="the target assigned offsets"):
            lane.run()
    finally:
        stop.set()
        intruder.join(30)

    # then: its transaction was aborted when it failed: the remote partition's last stable
    # offset reaches its end within seconds, not after the transaction timeout
    deadline = time.monotonic() + 15
    while (ends := stable_and_end(clusters["target"], TopicPartition(remote, 0)))[0] < ends[1]:
        assert time.monotonic() < deadline, f"the last stable offset stays at {ends[0]} " \
            f"below {ends[1]}: the failed lane left its transaction open"
        time.sleep(0.5)


def one_partition_flow(clusters: dict[str, str], topic_name: str, tmp_path: Path,
                       count: int, extra: str = "") -> Flow:
    """A one-partition source topic holding `count` records, and the flow mirroring it."""
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, records(count))
    return flow_config(tmp_path, clusters, topic_name, extra).enabled_flows[0]


def flow_with_remote_topic(clusters: dict[str, str], topic_name: str, tmp_path: Path,
                           count: int) -> tuple[Flow, str]:
    """A one-partition source topic of `count` records, its flow, and its remote topic made
    on the target before the flow's first cycle (by someone else): the flow, the remote."""
    flow = one_partition_flow(clusters, topic_name, tmp_path, count)
    create_topic(clusters["target"], flow.remote_topic(topic_name), 1)
    return flow, flow.remote_topic(topic_name)


def test_a_first_cycle_into_a_remote_partition_another_mirror_filled_copies_nothing(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: an old mirror copied the source's 500 records into the remote topic and was
    # stopped; nobody adopted its progress
    from ferry.steps.plan import UnmappedRecordsError
    from tests.support.kafka_data import run_cycle

    flow, remote = flow_with_remote_topic(clusters, topic_name, tmp_path, 500)
    produce(clusters["target"], remote, records(500))

    # when / then: the flow's first cycle is refused, naming the partition and the ways on
    with pytest.raises(UnmappedRecordsError, match=rf"{remote}-0 \(offsets 0\.\.499\).*"
                                                   r"ferry adopt.*unmapped = append"):
        run_cycle(flow, "first")
    assert len(read_all(clusters["target"], remote, 0)) == 500


def test_a_first_cycle_after_a_first_transaction_that_never_committed_copies_everything(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: the remote partition holds only the records of an aborted transaction (a lane
    # killed inside its first transaction)
    from tests.support.kafka_data import run_cycle

    flow, remote = flow_with_remote_topic(clusters, topic_name, tmp_path, 50)
    dead = Producer(conf(clusters["target"], **{"transactional.id": f"{topic_name}-dead"}))
    dead.init_transactions(30)
    dead.begin_transaction()
    for i in range(10):
        dead.produce(remote, value=f"aborted-{i}".encode(), partition=0)
    dead.flush(30)
    dead.abort_transaction(30)

    # when
    assert run_cycle(flow, "first") == 50

    # then
    assert_exact(flow, clusters, topic_name, 1)


def test_a_deleted_offset_map_topic_is_never_recreated_by_a_writer_with_the_brokers_defaults(
    clusters: dict[str, str], third_cluster: str, topic_name: str, tmp_path: Path
) -> None:
    # given: a flow's map topic deleted after its first cycle, on a target whose brokers
    # create a topic a client asks for (with their default 7-day retention)
    from confluent_kafka.admin import AdminClient

    from tests.support.kafka_data import run_cycle

    clusters = {"source": clusters["source"], "target": third_cluster}
    flow = one_partition_flow(clusters, topic_name, tmp_path, 10)
    run_cycle(flow, "first")
    admin = AdminClient(conf(clusters["target"]))
    admin.delete_topics([offset_map_topic(flow)])[offset_map_topic(flow)].result(30)
    deadline = time.monotonic() + 30
    while offset_map_topic(flow) in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.2)

    # when: a writer copies new records without a cycle's plan before it
    produce(clusters["source"], topic_name, records(5, 10))
    with pytest.raises(FerryError, match=r"offset-map topic \S+ is not on cluster .*nothing "
                                         r"was copied.*next cycle of the flow creates it"):
        Lane(flow, [Range(topic_name, 0, 10, 15, expect=10)], "writer-alone").run()

    # then: it failed without creating the map topic; a cycle creates it kept forever
    assert offset_map_topic(flow) not in admin.list_topics(timeout=10).topics
    run_cycle(flow, "second")
    from ferry.kafka.admin import Admin
    from ferry.kafka.configs import describe_topic_configs

    found = describe_topic_configs(Admin(flow.target_admin), [offset_map_topic(flow)])
    assert found[offset_map_topic(flow)]["retention.ms"].value == "-1"


def test_a_cycle_refuses_to_copy_into_an_offset_map_topic_that_would_forget(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: someone set a retention on the flow's map topic
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    from ferry.errors import TerminalError
    from tests.support.kafka_data import run_cycle

    flow = one_partition_flow(clusters, topic_name, tmp_path, 10)
    run_cycle(flow, "first")
    admin = AdminClient(conf(clusters["target"]))
    resource = ConfigResource(ConfigResource.Type.TOPIC, offset_map_topic(flow),
                              incremental_configs=[ConfigEntry(
                                  "retention.ms", "604800000",
                                  incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)

    # when / then: the next cycle copies nothing and says what to do
    produce(clusters["source"], topic_name, records(5, 10))
    with pytest.raises(TerminalError, match=r"retention\.ms=604800000.*retention\.ms=-1"):
        run_cycle(flow, "second")
    assert len(read_all(clusters["target"], flow.remote_topic(topic_name), 0)) == 10


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_a_positions_reset_is_kept_when_the_position_is_later_restored_from_the_offset_map(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, delivery: str
) -> None:
    # given: 100 records mirrored, then the operator resets the flow to offset 60 (to copy
    # 60.. again into the remote topic on purpose)
    from ferry.core.internal import positions_group
    from ferry.steps import positions
    from ferry.steps.plan import prepare as plan_only
    from tests.support.kafka_data import run_cycle

    flow = one_partition_flow(clusters, topic_name, tmp_path, 100,
                              f"ferry.delivery = {delivery}\n")
    run_cycle(flow, "first")
    positions.reset(flow, topic_name, "60")

    # when: Kafka expires the position (deleted here), and a cycle restores it
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(conf(clusters["target"]))
    remote = flow.remote_topic(topic_name)
    admin.delete_consumer_groups([positions_group(flow)])[positions_group(flow)].result(30)
    planned = plan_only(flow, run_id="after-expiry")

    # then: the reset position, not the one before it
    assert [(r.start, r.end) for r in planned.plan.copies] == [(60, 100)]
    # (a transaction's offsets show once its markers are written, a moment after its
    # commit returned: read until they do, a few seconds at most)
    deadline = time.monotonic() + 10
    while True:
        found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
            positions_group(flow), [TopicPartition(remote, 0)])], require_stable=True
        )[positions_group(flow)].result(30)
        offsets = [tp.offset for tp in found.topic_partitions]
        if offsets != [-1001] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert offsets == [60]


def test_two_cycles_of_one_flow_at_once_with_2_and_8_lanes_over_many_rounds_stay_exact(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: one flow as a scheduled run sees it (tasks.max=2) and as an operator's
    # `ferry mirror` on local[8] sees it (tasks.max=8), over 8 partitions; each round runs
    # whole cycles (heartbeat, sync, plan, copy as the copy job does: the run named the
    # newest, then its 2 or 8 lanes side by side, record, checkpoints), the two started at
    # the same moment
    from ferry.config import Config
    from ferry.steps.cycle import run
    from tests.support.kafka_data import LanesHere

    create_topic(clusters["source"], topic_name, 8)
    two = flow_config(tmp_path, clusters, topic_name, "tasks.max = 2\n")
    eight_path = tmp_path / "eight.properties"
    eight_path.write_text((tmp_path / "mm2.properties").read_text().replace("tasks.max = 2",
                                                                            "tasks.max = 8"))
    eight = load_config(eight_path)
    flow = two.enabled_flows[0]
    refused_per_round: list[list[str]] = []

    # when: each round, new records, then both cycles started at the same moment
    for n in range(8):
        produce(clusters["source"], topic_name,
                [(None, f"r{n}-{i}".encode(), i % 8) for i in range(2_000)])
        start, refused, broke = threading.Barrier(2), [], []

        def cycle(config: Config, run_id: str, start: threading.Barrier = start,
                  refused: list[str] = refused, broke: list[BaseException] = broke) -> None:
            runner = LanesHere(config.flow(flow.name))
            try:
                start.wait(30)
                result = run(config.path, config, config.flow(flow.name), run_id=run_id,
                             runner=runner)
                if not result.ok:  # one line per run: the first range's reason
                    refused.append(runner.failures[0] if runner.failures else
                                   f"exit {result.copy_exit_code}")
            except FerryError as exc:
                refused.append(str(exc))
            except BaseException as exc:  # anything else fails the test, not just the thread
                broke.append(exc)

        threads = [threading.Thread(target=cycle, args=(config, f"round-{n}-{lanes}"))
                   for config, lanes in zip((two, eight), (2, 8), strict=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
        assert not any(thread.is_alive() for thread in threads), f"round {n}: a cycle hung"
        assert broke == [], f"round {n}: {broke!r}"
        refused_per_round.append(refused)
    last = run(two.path, two, flow, run_id="last", runner=LanesHere(flow))  # what is left
    assert last.ok

    # then: every record once, in order; at most one of the two refused in a round, with
    # one line saying why
    assert_exact(flow, clusters, topic_name, 8)
    assert all(len(refused) <= 1 for refused in refused_per_round), refused_per_round
    for line in (text for refused in refused_per_round for text in refused):
        assert "\n" not in line, line
        assert "started after this one" in line or "was taken by a newer writer" in line, line


def test_a_continuous_loop_abandons_a_hung_cycle_and_the_next_cycle_fences_its_writer(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a continuous loop whose cycles may take 5 s, and a first cycle whose writer
    # hangs inside its first transaction (its records sent, not committed)
    from ferry.steps.cycle import CycleResult, run_continuously
    from tests.support.kafka_data import LanesHere

    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, records(300))
    config = flow_config(tmp_path, clusters, topic_name, "ferry.cycle.timeout.seconds = 5\n")
    flow = config.enabled_flows[0]
    runner = LanesHere(flow, hold_first=True)
    reported: list[CycleResult] = []

    # when: the loop runs until three cycles are reported; then the hung writer goes on
    run_continuously(config.path, config, flow, lambda result, _s: reported.append(result),
                     stop=lambda: len(reported) >= 3, runner=runner)
    assert runner.held.is_set()
    runner.release.set()
    deadline = time.monotonic() + 60
    while not runner.held_failures:
        assert time.monotonic() < deadline, "the hung writer neither failed nor ended"
        time.sleep(0.1)

    # then: the hung cycle was abandoned, the next ones ran and copied; the hung writer,
    # fenced by the next cycle's (the same writer id), stopped with one line and committed
    # nothing, so every record is on the target once
    assert [r.abandoned for r in reported] == [True, False, False]
    assert all(r.ok for r in reported[1:]) and not reported[0].ok
    (failure,) = runner.held_failures
    assert "was taken by a newer writer" in str(failure) and "\n" not in str(failure)
    assert_exact(flow, clusters, topic_name, 1)

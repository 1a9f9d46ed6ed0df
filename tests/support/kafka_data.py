"""Test data on real brokers, and record-by-record readers (no mocks)."""

from __future__ import annotations

import bisect
import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from ferry.config import Config, Flow, load_config
from ferry.core.internal import offset_map_topic
from ferry.core.lanes import by_writer, lanes_of
from ferry.core.offsetmap import decode, lookup
from ferry.core.plan_file import PlanFile
from ferry.core.planner import Range
from ferry.errors import FerryError, WriterTaken
from ferry.kafka.lane import Lane
from ferry.kafka.lane_state import Part
from ferry.steps.plan import prepare
from tests.support import runner

Conn = str | Mapping[str, str]
"""A cluster to talk to: bootstrap servers, or librdkafka settings (secure clusters)."""


def conf(conn: Conn, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"bootstrap.servers": conn} if isinstance(conn, str) else dict(conn)
    return base | extra


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int

    def content(self) -> tuple[object, ...]:
        """What must survive the mirror unchanged."""
        return (self.key, self.value, self.headers, self.timestamp)


def create_topic(bootstrap: Conn, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    """A topic with the cluster's default replication factor (3 on three-node clusters),
    returned once the broker lists it with a leader for each partition: the creation
    returns before the brokers' metadata shows it, and a test that lists or plans at once
    may otherwise not find it yet. Fails if it is not listed so within 60 s."""
    admin = AdminClient(conf(bootstrap))
    admin.create_topics([NewTopic(name, partitions, -1, config=config or {})])[name].result(30)
    _wait_listed(admin, name, partitions, "created")


def grow_topic(bootstrap: Conn, name: str, partitions: int) -> None:
    """Grow `name` to `partitions`, returned once the broker lists each with a leader."""
    admin = AdminClient(conf(bootstrap))
    admin.create_partitions([NewPartitions(name, partitions)])[name].result(30)
    _wait_listed(admin, name, partitions, "grown")


def _wait_listed(admin: AdminClient, name: str, partitions: int, done: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = admin.list_topics(name, timeout=10).topics.get(name)
        if found is not None and found.error is None and len(found.partitions) == partitions \
                and all(p.leader >= 0 for p in found.partitions.values()):
            return
        time.sleep(0.05)
    # a test going on would plan without the topic and fail far from the cause
    raise AssertionError(f"topic {name} was {done} but the broker did not list its "
                         f"{partitions} partitions with a leader each within 60 s")


def recreate_topic(bootstrap: Conn, name: str, partitions: int = 1) -> None:
    """Delete `name` and create it again (a new topic ID), waiting out the deletion, which
    completes asynchronously."""
    admin = AdminClient(conf(bootstrap))
    admin.delete_topics([name])[name].result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            create_topic(bootstrap, name, partitions)
            return
        except KafkaException:
            assert time.monotonic() < deadline, f"{name} could not be created again"
            time.sleep(0.5)


def produce(bootstrap: Conn, topic: str, records: list[tuple[bytes | None, bytes | None, int]],
            headers: bool = True) -> None:
    """(key, value, partition) records with CreateTime now-ish and a header per record.
    Fails naming the partition if the broker did not take a record: flush() counts only
    what is still queued, and a record refused (say, for a partition not yet in the
    producer's metadata) would otherwise be missing in silence."""
    producer = Producer(conf(bootstrap, **{"linger.ms": 5, "enable.idempotence": True}))
    refused: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            refused.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    base = int(time.time() * 1000) - 60_000
    for i, (key, value, partition) in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition,
                                 timestamp=base + i,
                                 headers=[("seq", str(i).encode()), ("empty", b"")]
                                 if headers else None, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
            except KafkaException as exc:  # refused at once: the metadata lists no such
                refused.append(f"{topic}-{partition}: {exc.args[0].str()}")  # partition
                break
    assert producer.flush(60) == 0
    assert not refused, f"{len(refused)} records not delivered, first {refused[0]}"


def produce_transactions(bootstrap: Conn, topic: str, batches: list[tuple[int, bool]],
                         tid: str, partition: int = 0) -> None:
    """Batches of (count, commit?) in transactions; aborted ones are flushed first so their
    records really are in the log."""
    producer = Producer(conf(bootstrap, **{"transactional.id": tid}))
    producer.init_transactions(30)
    n = 0
    for count, commit in batches:
        producer.begin_transaction()
        for _ in range(count):
            producer.produce(topic, key=f"k{n}".encode(), value=f"txn-{n}".encode(),
                             partition=partition)
            n += 1
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def read_all(bootstrap: Conn, topic: str, partition: int, timeout: float = 30.0,
             group: str = "ferry-test-reader") -> list[Rec]:
    """Every committed record of one partition, from the start to the current end: every
    transaction committed before the call included."""
    consumer = Consumer(conf(bootstrap, **{
        "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed",
        "enable.partition.eof": True}))
    tp = TopicPartition(topic, partition)
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=10)  # high: the LSO
        written = _written_end(bootstrap, tp)
        if high < written:
            # A transaction committed a moment ago: its markers, and with them the last
            # stable offset, reach the partition asynchronously, and a copy checked at once
            # would miss its last records. Wait for them (10 s at most: a transaction
            # still open has nothing committed to read past its start).
            deadline = time.monotonic() + 10
            while high < written and time.monotonic() < deadline:
                time.sleep(0.05)
                low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        if high <= low:
            return []
        consumer.assign([TopicPartition(topic, partition, low)])
        records: list[Rec] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return records
                    raise AssertionError(err)
                records.append(Rec(msg.offset(), msg.key(), msg.value(),
                                   tuple(msg.headers() or ()), msg.timestamp()[1]))
        raise AssertionError(f"reading {topic}-{partition} timed out")
    finally:
        consumer.close()


def _written_end(bootstrap: Conn, tp: TopicPartition) -> int:
    """The partition's high watermark, committed or not."""
    consumer = Consumer(conf(bootstrap, **{"group.id": "ferry-test-hwm",
                                           "isolation.level": "read_uncommitted"}))
    try:
        return int(consumer.get_watermark_offsets(tp, timeout=10)[1])
    finally:
        consumer.close()


def wait_lso(bootstrap: Conn, topic: str, partition: int, end: int, timeout: float = 15) -> None:
    """Wait until the partition's last stable offset reaches `end` (markers are async)."""
    consumer = Consumer(conf(bootstrap, **{"group.id": "ferry-test-lso",
                                           "isolation.level": "read_committed"}))
    try:
        deadline = time.monotonic() + timeout
        while consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1] < end:
            assert time.monotonic() < deadline, f"LSO of {topic}-{partition} stuck"
            time.sleep(0.1)
    finally:
        consumer.close()


def flow_config(tmp: Path, clusters: dict[str, str], topics: str, extra: str = "",
                replicas: int = 1) -> Config:
    """A config mirroring `topics` from the session's source cluster to its target, its
    topics (remote, offset map, checkpoints) created with `replicas` replicas, its copies on
    the test's Spark (`tests.support.runner`: the warm server unless marked spark_submit).

    The aliases are unique to the test directory (`src_<id>`, `tgt_<id>`): tests share the
    brokers, and what a flow keeps on the target (offset-map topic, positions group) is
    named by its aliases, so each test's flow gets its own."""
    path = tmp / "mm2.properties"
    if path.exists():  # the same test rewriting its config keeps its aliases
        source = load_config(path).enabled_flows[0].source
    else:
        source = f"src_{uuid.uuid4().hex[:6]}"
    target = "tgt_" + source[4:]
    master = runner.warm_master() if "ferry.spark.master" not in extra else None
    if master is not None:  # copies through the session's warm Spark (tests/support/runner.py)
        extra = f"ferry.spark.master = {master}\n" + extra
    extra = runner.runner_settings(extra) + extra
    path.write_text(
        f"clusters = {source}, {target}\n{source}.bootstrap.servers = {clusters['source']}\n"
        f"{target}.bootstrap.servers = {clusters['target']}\n{source}->{target}.enabled = true\n"
        f"{source}->{target}.topics = {topics}\nreplication.factor = {replicas}\n"
        f"checkpoints.topic.replication.factor = {replicas}\n"
        f"emit.heartbeats.enabled = false\nferry.state.dir = {tmp / 'state'}\n"
        # The brokers are shared: another test's `heartbeats` topic is not this flow's.
        "heartbeats.replication.enabled = false\n" + extra)
    return load_config(path)


COMPACTION_EXCLUDE = ("config.properties.exclude = segment\\.ms, min\\.cleanable\\.dirty\\.ratio, "
                      "min\\.compaction\\.lag\\.ms\n")
"""Keeps the remote topic uncompacted (it takes the source's non-default configs), so the
two logs compare record by record."""


def compacted_topic(bootstrap: Conn, topic: str, rounds: int = 6) -> None:
    """A one-partition compacted topic whose cleaner has already made holes: even records
    overwrite 10 keys (compacted away), odd ones are unique (kept), some are tombstones.
    Then its cleaning stops (`min.cleanable.dirty.ratio` 1: no log is ever that dirty) and
    the log is left as it is: a later pass of the cleaner would remove records after they
    were mirrored, and a test comparing the two logs would compare a source that moved."""
    create_topic(bootstrap, topic, 1, {
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000"})
    for round_ in range(rounds):  # segments roll by time: the cleaner compacts all but the last
        time.sleep(0.3)
        produce(bootstrap, topic,
                [((f"key-{i % 10}" if i % 2 == 0 else f"u{round_}-{i}").encode(),
                  None if i % 13 == 0 else f"v{round_}-{i}".encode(), 0)
                 for i in range(60)], headers=False)
    deadline = time.monotonic() + 90
    while len(read_all(bootstrap, topic, 0)) >= rounds * 60:
        assert time.monotonic() < deadline, "the log cleaner never compacted the topic"
        time.sleep(1)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "1.0",
                    incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient(conf(bootstrap))
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    # a pass already under way still ends: wait until two reads a moment apart agree
    before, after = None, [r.content() for r in read_all(bootstrap, topic, 0)]
    while before != after:
        assert time.monotonic() < deadline, "the log cleaner never left the topic alone"
        time.sleep(2)
        before, after = after, [r.content() for r in read_all(bootstrap, topic, 0)]


def pausing(at: str, reached: threading.Event, release: threading.Event) -> type[Lane]:
    """A writer class that stops at `at` and waits there until `release` is set, after
    setting `reached`: at "positions" (its id taken, its positions read, nothing sent),
    "commit" (its first transaction's records sent, not committed) or "second-commit"
    (likewise, its first batch committed)."""
    commits = {"commit": 1, "second-commit": 2}.get(at, 0)

    class Paused(Lane):
        def _copy(self, producer: Producer, consumer: Consumer, metadata: object) -> None:
            if at == "positions":
                reached.set()
                release.wait(60)
            super()._copy(producer, consumer, metadata)

        def commit(self, producer: Producer, metadata: object, parts: list[Part]) -> None:
            if self.transactions + 1 == commits and not reached.is_set():
                reached.set()
                release.wait(60)
            super().commit(producer, metadata, parts)

    return Paused


def paused_writer(flow: Flow, ranges: list[Range], run_id: str, at: str
                  ) -> tuple[Lane, threading.Event, threading.Event, list[BaseException]]:
    """A writer (`pausing`) run in a thread that stops at `at` and waits there until
    released. Returns the writer, the event it sets when it reached `at`, the event that
    releases it, and its failure, if any, once joined."""
    reached, release = threading.Event(), threading.Event()
    writer = pausing(at, reached, release)(flow, ranges, run_id)
    writer.thread, found = in_thread(writer)  # type: ignore[attr-defined]
    assert reached.wait(60), f"the writer never reached {at}"
    return writer, reached, release, found


class LanesHere:
    """A copy runner (`ferry.steps.ports.CopyRunner`) that runs a plan's writer slots in
    this process as the copy job runs them: named the flow's newest run, then the plan's
    lanes side by side (threads), each running its slots (`write_slots`); it hands back the
    run as the job would have recorded it (nothing is appended to Delta). With
    `hold_first`, the first plan's writers stop inside their first transaction (records
    sent, not committed; `held` set) until `release` is set: a cycle that hangs with its
    transaction open. A held writer's failure goes to `held_failures`."""

    def __init__(self, flow: Flow, hold_first: bool = False,
                 writer: type[Lane] | None = None) -> None:
        self.flow, self.hold_first, self.writer = flow, hold_first, writer
        self.held, self.release = threading.Event(), threading.Event()
        self.held_failures: list[FerryError] = []
        self.failures: list[str] = []
        """Why each range that failed did (its `runs` row's error)."""
        self.runs = 0

    reads_plan_file = False

    def run(self, plan: PlanFile, plan_path: str | None = None) -> Any:
        from ferry.core.job import Copied, run_summary
        from ferry.core.tables import RangeOutcome
        from ferry.runtime.slots import name_newest, write_slots

        self.runs += 1
        slots = by_writer(plan.ranges, self.flow.ferry.writers)
        if self.hold_first and self.runs == 1:
            writer = pausing("commit", self.held, self.release)
            for ranges in slots.values():
                try:
                    writer(self.flow, ranges, plan.run_id).run()
                except FerryError as exc:
                    self.held_failures.append(exc)
            return Copied(0)
        name_newest(self.flow, plan.run_id, plan.role)
        rows: list[dict[str, Any]] = []
        broke: list[BaseException] = []

        def lane(mine: list[int]) -> None:
            try:
                rows.extend(write_slots(self.flow, plan.run_id, [(s, slots[s]) for s in mine],
                                        plan.role, self.writer))
            except BaseException as exc:  # raised in the caller's thread below
                broke.append(exc)

        threads = [threading.Thread(target=lane, args=(mine,))
                   for mine in lanes_of(slots, plan.lanes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if broke:
            raise broke[0]
        failed = [r["error"] for r in rows if r["outcome"] == RangeOutcome.FAILED]
        self.failures.extend(failed)
        return Copied(1 if failed else 0, run_summary(plan.run_id, rows, len(plan.gaps)))


def in_thread(writer: Lane) -> tuple[threading.Thread, list[FerryError]]:
    """Run `writer` in a started daemon thread: the thread, and the list that receives its
    failure, if any."""
    failure: list[FerryError] = []

    def run() -> None:
        try:
            writer.run()
        except FerryError as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, failure


@contextlib.contextmanager
def down_cluster(how: str) -> Iterator[str]:
    """The bootstrap address of a cluster that is down: `stopped` (nothing listens there:
    every connection is refused) or `hung` (it accepts connections and never answers)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        if how == "hung":
            listener.listen(64)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def run_cycle(flow: Flow, run_id: str = "run", restore: bool = True) -> int:
    """One cycle's plan and copy in-process, through the real steps: the plan step
    (`prepare`: sync, then exact ranges; `restore`: commit expired positions back from the
    offset map) writes its plan file as a cycle does, and the copy job's own lanes run it
    (`LanesHere`: the flow's newest run named, the plan's lanes side by side, each writing
    its slots with `write_slots`). Nothing is appended to Delta (no Spark). Returns the
    records copied; a writer that failed raises its error, as the lane raised it."""

    prepared = prepare(flow, run_id=run_id, restore=restore)
    if not prepared.plan.ranges:
        return 0
    failures: list[FerryError] = []

    class Kept(Lane):
        """A lane whose failure is kept for the caller (`write_slots` records it). A slot a
        newer writer took is not a failure by itself: the job may take it back."""

        def run(self) -> Any:
            try:
                return super().run()
            except WriterTaken:
                raise
            except FerryError as exc:
                failures.append(exc)
                raise

    runner = LanesHere(flow, writer=Kept)
    copied = runner.run(prepared.plan_file())
    if failures:
        raise failures[0]
    if copied.exit_code:  # ranges left failed without a writer's error: say why
        raise FerryError("; ".join(runner.failures))
    return int(copied.summary["records"])


def assert_exact(flow: Flow, clusters: Mapping[str, Conn], topic: str, partitions: int) -> None:
    """Every source record is on the target once, in order, unchanged, and the offset map
    sends each source offset to the target offset that holds that record."""
    entries = [decode(r.value) for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    for p in range(partitions):
        source = read_all(clusters["source"], topic, p)
        target = read_all(clusters["target"], flow.remote_topic(topic), p)
        assert [r.content() for r in target] == [r.content() for r in source]
        mine = sorted((e for e in entries if e.source_topic == topic and e.source_partition == p),
                      key=lambda e: e.covered_start)
        starts = [e.covered_start for e in mine]
        by_offset = {r.offset: r for r in target}
        for record in source:
            # the entry starting last at or before it first (a long copy's map holds
            # thousands), then the walk of them all
            at = bisect.bisect_right(starts, record.offset) - 1
            found = lookup(mine[at:at + 1] if at >= 0 else [], record.offset) or lookup(
                mine, record.offset)
            assert found is not None and found[1] is not None, record.offset
            assert by_offset[found[1]].content() == record.content()


def written(bootstrap: str, topic: str, partitions: int,
            consumer: Consumer | None = None) -> int:
    """Records written to a topic so far, committed or not (its high watermarks). Pass a
    `consumer` to poll often: a new client per call takes long enough for a fast copy to
    run past the point being waited for."""
    own = consumer is None
    consumer = consumer or Consumer({"bootstrap.servers": bootstrap,
                                     "group.id": "ferry-test-hwm",
                                     "isolation.level": "read_uncommitted"})
    try:
        total = 0
        for p in range(partitions):
            with contextlib.suppress(KafkaException):  # the remote topic may not exist yet
                total += consumer.get_watermark_offsets(TopicPartition(topic, p), 5)[1]
        return total
    finally:
        if own:
            consumer.close()


def stable_and_end(bootstrap: str, tp: TopicPartition) -> tuple[int, int]:
    """(last stable offset, end) of a partition: equal unless a transaction is open."""
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        probe = Consumer(conf(bootstrap, **{"group.id": "ferry-test-lso",
                                            "isolation.level": isolation}))
        ends.append(probe.get_watermark_offsets(tp, timeout=10)[1])
        probe.close()
    return ends[0], ends[1]

"""Taking over from a running mirror in place (`ferry adopt`), on real brokers.

A real MirrorMaker 2 (dedicated mode, the `connect-mirror` jars) mirrors plain,
transactional and compacted partitions while records flow, and is killed; an MM1-style
consumer/producer pair that commits its group is stopped the same way. Ferry adopts their
progress, continues with a cycle, and the target then holds every source record once: no
re-copy, no seam. The offset map is exact for the history the old mirror copied, so a
group that committed on the source fails over with nothing re-read and nothing lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from ferry.config import Flow
from ferry.core.internal import offset_map_topic
from ferry.core.offsetmap import decode, lookup
from ferry.jars import kafka_jars, log4j_config
from ferry.kafka.retry import transient
from tests.support.groups import commit_group, committed, positions
from tests.support.kafka_data import (
    COMPACTION_EXCLUDE,
    assert_exact,
    compacted_topic,
    conf,
    create_topic,
    flow_config,
    paused_writer,
    produce,
    produce_transactions,
    read_all,
)
from tests.support.mm1 import mm1_flow

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def ferry(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "ferry.cli.main", *args], capture_output=True,
                          text=True, timeout=900, check=False)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def ends(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(conf(bootstrap, **{"group.id": "adopt-test-ends"}))
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return [0] * partitions
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def reached(bootstrap: str, topic: str, wanted: list[int]) -> bool:
    """Each partition's end is at least what is wanted."""
    return all(e >= w for e, w in zip(ends(bootstrap, topic, len(wanted)), wanted,
                                       strict=True))




def mm2(tmp: Path, flow: Flow, clusters: dict[str, str], topics: str, group: str
        ) -> subprocess.Popen[bytes]:
    """MirrorMaker 2, dedicated mode, mirroring `topics` as `flow`'s clusters: progress
    flushed every 5 s, checkpoints of `group` every second."""
    config = tmp / "mm2-dedicated.properties"
    config.write_text(
        f"clusters = {flow.source}, {flow.target}\n"
        f"{flow.source}.bootstrap.servers = {clusters['source']}\n"
        f"{flow.target}.bootstrap.servers = {clusters['target']}\n"
        f"{flow.source}->{flow.target}.enabled = true\n"
        f"{flow.source}->{flow.target}.topics = {topics}\n"
        f"{flow.target}->{flow.source}.enabled = false\n"
        "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
        "offset.storage.replication.factor = 1\nstatus.storage.replication.factor = 1\n"
        "config.storage.replication.factor = 1\ntasks.max = 2\n"
        "sync.topic.acls.enabled = false\n"
        f"{flow.target}.offset.flush.interval.ms = 5000\n"  # the worker takes it from its cluster
        f"groups = {group}\nemit.checkpoints.interval.seconds = 1\n"
        "refresh.groups.interval.seconds = 2\nsync.group.offsets.enabled = false\n"
        + COMPACTION_EXCLUDE)
    java = ["java", "-Xmx512m", f"-Dlog4j2.configurationFile={log4j_config()}", "-cp",
            f"{kafka_jars()}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(config),
            "--clusters", flow.target]
    log = open(tmp / "mm2.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(java, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def killed(process: subprocess.Popen[bytes]) -> None:
    """Stop the old mirror as a crash would: no last flush."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
    """Poll `predicate` until it holds. A transient Kafka error from it counts as not yet:
    MM2 creates the remote topics, and a topic in the metadata may still have no leader
    (NOT_LEADER_FOR_PARTITION from the watermarks) or be unknown to the broker asked."""
    deadline = time.monotonic() + timeout
    while not _holds(predicate):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _holds(predicate: Callable[[], bool]) -> bool:
    try:
        return predicate()
    except KafkaException as failure:
        if transient(failure, also=(KafkaError.UNKNOWN_TOPIC_OR_PART,)):
            return False
        raise


def records_from(bootstrap: str, topic: str, partition: int, offset: int
                 ) -> list[tuple[object, ...]]:
    return [r.content() for r in read_all(bootstrap, topic, partition) if r.offset >= offset]


@dataclass
class MM2History:
    config: Path
    flow: Flow
    names: dict[str, str]
    doubled: dict[int, int]
    """Per partition of `<t>.plain`: records MM2 copied twice (its restart replayed them)."""
    replays: dict[int, int]
    """Per partition of `<t>.plain`: the restarts that replayed some of its records, each a
    stretch of doubled records (one, unless MM2 flushed only one partition before a kill
    and was started again: on a loaded machine it does)."""
    unflushed: dict[int, int]
    """Per partition of `<t>.plain`: records MM2 copied after its last flush, then crashed."""


class MM2Run:
    """A real MM2 mirroring `<t>.*`, crashed and restarted as production would see it."""

    def __init__(self, tmp: Path, flow: Flow, clusters: dict[str, str], topic_name: str
                 ) -> None:
        self.tmp, self.flow, self.clusters = tmp, flow, clusters
        self.topics, self.group = f"{topic_name}\\..*", f"{topic_name}-billing"
        self.plain = f"{topic_name}.plain"
        self.remote = flow.remote_topic(self.plain)
        self.process: subprocess.Popen[bytes] | None = None
        self.bursts = 0
        self.doubled_so_far = {0: 0, 1: 0}  # copies the target holds beyond the source's
        self.replays = {0: 0, 1: 0}  # restarts that replayed some of a partition's copies

    def replayed(self, copies: dict[int, int]) -> None:
        """MM2 restarts after a kill that left `copies` per partition unflushed: its
        restart copies them again."""
        for p in (0, 1):
            self.doubled_so_far[p] += copies[p]
            self.replays[p] += int(copies[p] > 0)

    def start(self) -> None:
        self.process = mm2(self.tmp, self.flow, self.clusters, self.topics, self.group)

    def stop(self) -> None:
        if self.process is not None:
            killed(self.process)
            self.process = None

    def progress(self) -> dict[int, int]:
        from ferry.core.internal import reader_group
        from ferry.kafka.adoption import connect_progress

        found = connect_progress(self.flow.target_admin, f"mm2-offsets.{self.flow.source}"
                                 ".internal", self.flow.source, reader_group(self.flow, "t"))
        return {p: found.get((self.plain, p), 0) for p in (0, 1)}

    def crash_with_unflushed_copies(self) -> dict[int, int]:
        """Bursts until MM2 copied records it has not flushed, then SIGKILL; per partition,
        the records copied after the last flush."""
        for _ in range(6):
            self.bursts += 1
            produce(self.clusters["source"], self.plain,
                    [(f"burst{self.bursts}-{i}".encode(), b"y", i % 2) for i in range(20)])
            source = ends(self.clusters["source"], self.plain, 2)
            wanted = [source[p] + self.doubled_so_far[p] for p in (0, 1)]
            wait_for(partial(reached, self.clusters["target"], self.remote, wanted),
                     "the burst's copy")
            if min(e - f for e, f in zip(source, self.progress().values(), strict=True)) > 0:
                self.stop()
                after = self.progress()  # what it flushed before the kill is what counts
                unflushed = {p: source[p] - after[p] for p in (0, 1)}
                if min(unflushed.values()) > 0:
                    return unflushed
                self.replayed(unflushed)  # it flushed one partition in between: the
                self.start()                # restart replays the other's
            time.sleep(0.5)
        raise AssertionError("MM2 flushed every burst before it could be killed")


@pytest.fixture
def mm2_history(clusters: dict[str, str], topic_name: str, tmp_path: Path
                ) -> Iterator[MM2History]:
    """Topics `<t>.plain` (2 partitions), `<t>.txn` and `<t>.compacted` that a real MM2
    mirrored while records flowed. MM2 crashed with copies it had not flushed, was
    restarted (replaying, so doubling, those), crashed again with unflushed copies, and was
    not restarted; more records came after."""
    names = {k: f"{topic_name}.{k}" for k in ("plain", "txn", "compacted")}
    create_topic(clusters["source"], names["plain"], 2)
    create_topic(clusters["source"], names["txn"], 1)
    compacted_topic(clusters["source"], names["compacted"])
    produce(clusters["source"], names["plain"],
            [(f"k{i}".encode(), f"v{i}".encode(), i % 2) for i in range(400)])
    produce_transactions(clusters["source"], names["txn"], [(30, True), (10, False), (30, True)],
                         f"{topic_name}-txn")
    commit_group(clusters["source"], f"{topic_name}-billing", names["plain"], {0: 150, 1: 40})
    config = flow_config(tmp_path, clusters, f"{topic_name}\\..*", COMPACTION_EXCLUDE)
    flow = config.enabled_flows[0]
    run = MM2Run(tmp_path, flow, clusters, topic_name)
    run.start()
    try:
        wait_for(lambda: sum(ends(clusters["target"], run.remote, 2)) >= 400,
                 "MM2's first copy")
        for round_ in range(5):  # records flow while it runs
            produce(clusters["source"], names["plain"],
                    [(f"r{round_}-{i}".encode(), b"x", i % 2) for i in range(40)])
            time.sleep(0.4)
        produce_transactions(clusters["source"], names["txn"], [(20, True)], f"{topic_name}-txn")
        wait_for(lambda: sum(ends(clusters["target"], run.remote, 2)) >= 600, "MM2's copy")
        time.sleep(6)  # a flush (every 5 s) and a checkpoint: all of that is MM2's progress
        run.replayed(run.crash_with_unflushed_copies())
        run.start()  # it replays from its last flush: those records are doubled
        source = ends(clusters["source"], names["plain"], 2)
        wanted = [source[p] + run.doubled_so_far[p] for p in (0, 1)]
        wait_for(lambda: reached(clusters["target"], run.remote, wanted), "MM2's replay")
        unflushed = run.crash_with_unflushed_copies()
    finally:
        run.stop()
    produce(clusters["source"], names["plain"],
            [(f"after-{i}".encode(), b"z", i % 2) for i in range(30)])
    yield MM2History(tmp_path / "mm2.properties", flow, names, dict(run.doubled_so_far),
                     dict(run.replays), unflushed)


def test_adopting_mm2_continues_where_it_stopped_with_an_exact_offset_map(
    clusters: dict[str, str], mm2_history: MM2History, topic_name: str, connect_url: str
) -> None:
    history = mm2_history
    config, flow, names = history.config, history.flow, history.names
    # past the killed workers' session timeout (10 s) and MM2's flush interval (5 s): the
    # first look waits that long; the later ones come after it, when MM2 has long been quiet,
    # and still read MM2's progress twice (a second apart)
    args = ("adopt", str(config), "--flow", flow.name, "--from", "mm2", "--json")
    settled = ("--settle", "15")
    args_later = (*args, "--settle", "1")

    # a dry run shows what adopting would do, and writes nothing
    shown = json.loads(ferry(*args, *settled).stdout)
    assert not shown["executed"]
    assert {p["status"] for p in shown["partitions"]} == {"would-adopt"}
    remote = flow.remote_topic(names["plain"])
    assert positions(clusters, flow, [(remote, 0), (remote, 1)]) == [-1001, -1001]

    # executed: every partition adopted; the pairs found account for every record
    report = json.loads(ferry(*args_later, "--execute").stdout)
    parts = {(p["topic"], p["partition"]): p for p in report["partitions"]}
    assert {p["status"] for p in parts.values()} == {"adopted"}
    for (topic, partition), p in parts.items():
        source = read_all(clusters["source"], topic, partition)
        assert p["missing"] == 0 and p["altered"] == 0, p
        assert p["matched"] + p["to_copy"] == len(source), p
        assert p["position"] >= p["progress"], p
    for partition in (0, 1):
        p = parts[(names["plain"], partition)]
        # the replay after MM2's restart: found, counted, each copy mapped to its first
        assert p["doubled"] == history.doubled[partition] > 0, p
        assert [f["kind"] for f in p["findings"]] == ["doubled"] * history.replays[partition], p
        # copied after its last flush before the second crash: adopted, not copied again
        assert p["after_progress"] == history.unflushed[partition] > 0, p
        assert p["position"] == p["progress"] + history.unflushed[partition]
        assert p["to_copy"] == 15  # the records that came after the crash
    txn = parts[(names["txn"], 0)]
    assert parts[(names["compacted"], 0)]["doubled"] == txn["doubled"] == 0
    print(f"\nadopted MM2's history: {sum(history.doubled.values())} records its restart "
          f"doubled, found; {sum(history.unflushed.values())} it copied after its last "
          f"flush, adopted, not copied again; {txn['extra']} aborted records it copied on "
          "the transactional topic, found")

    # adopting again changes nothing
    again = json.loads(ferry(*args_later, "--execute").stdout)
    assert {p["status"] for p in again["partitions"]} == {"already-adopted"}

    # the next cycle copies only what MM2 had not copied
    done = json.loads(ferry("mirror", str(config), "--flow", flow.name, "--master",
                            connect_url, "--json").stdout)
    assert done["steps"]["record"]["records"] == sum(p["to_copy"] for p in parts.values())
    assert_exact(flow, clusters, names["compacted"], 1)
    for (topic, partition), p in parts.items():
        assert_mapped_once(flow, clusters, topic, partition, p["doubled"] + p["extra"])

    # a group that committed on the source fails over through Ferry: it re-reads none of
    # what it read on the source and loses nothing; what it reads twice is MM2's doubles
    group = f"{topic_name}-billing"
    mm2_said = {(c.topic, c.partition): c.downstream_offset
                for c in _checkpoints(flow, group)}
    ferry("failover", str(config), "--flow", flow.name, "--mode", "planned", "--groups", group,
          "--master", connect_url, "--execute", "--json")
    on_target = committed(clusters["target"], group, [(remote, 0), (remote, 1)])
    for partition, read_to in ((0, 150), (1, 40)):
        after = records_from(clusters["target"], remote, partition, on_target[partition])
        expected = records_from(clusters["source"], names["plain"], partition, read_to)
        assert after[0] == expected[0]
        assert set(after) == set(expected)
        assert len(after) == len(expected) + history.doubled[partition]
        mm2_offset = mm2_said.get((remote, partition))
        print(f"failover of {group} on {names['plain']}-{partition}: Ferry re-reads 0; MM2's "
              f"checkpoint ({mm2_offset}) re-reads "
              f"{'-' if mm2_offset is None else on_target[partition] - mm2_offset}")


def _checkpoints(flow: Flow, group: str) -> list[object]:
    from ferry.kafka.groups import read_checkpoints

    return [c for c in read_checkpoints(flow, f"{flow.source}.checkpoints.internal")
            if c.group == group]


def assert_mapped_once(flow: Flow, clusters: dict[str, str], topic: str, partition: int,
                       unpaired: int) -> None:
    """Every committed source record maps through the offset map to its own copy on the
    target; the target's other records are the `unpaired` ones (doubled, extra) adopt
    reported."""
    entries = [decode(r.value) for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    mine = sorted((e for e in entries if e.source_topic == topic
                   and e.source_partition == partition), key=lambda e: e.covered_start)
    source = read_all(clusters["source"], topic, partition)
    target = {r.offset: r for r in read_all(clusters["target"], flow.remote_topic(topic),
                                            partition)}
    assert len(target) == len(source) + unpaired
    seen = set()
    for record in source:
        found = lookup(mine, record.offset)
        assert found is not None and found[1] is not None, record.offset
        assert target[found[1]].content() == record.content()
        seen.add(found[1])
    assert len(seen) == len(source)


def test_adopting_an_mm1_group_continues_after_its_last_copied_record(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, connect_url: str
) -> None:
    from tests.support.mm1 import command_line

    # given: an MM1-style pair copied 500 records, committing its group every 100, and 30
    # more after its last commit before it stopped; 20 came after
    create_topic(clusters["source"], topic_name, 2)
    create_topic(clusters["target"], topic_name, 2)
    produce(clusters["source"], topic_name,
            [(f"k{i}".encode(), f"v{i}".encode(), i % 2) for i in range(530)])
    group = f"{topic_name}-mm1"
    consumer = Consumer(conf(clusters["source"], **{
        "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    producer = Producer(conf(clusters["target"], **{"enable.idempotence": True}))
    consumer.subscribe([topic_name])
    copied = 0
    while copied < 530:
        for msg in consumer.consume(10, 1.0):
            if msg.error() is not None:
                continue
            _, ts = msg.timestamp()
            producer.produce(topic_name, msg.value(), msg.key(), partition=msg.partition(),
                             timestamp=ts, headers=msg.headers())
            copied += 1
            if copied % 100 == 0:
                producer.flush(30)
                consumer.commit(asynchronous=False)
    producer.flush(30)
    consumer.close()
    produce(clusters["source"], topic_name,
            [(f"after-{i}".encode(), b"z", i % 2) for i in range(20)])
    setup = command_line(tmp_path, clusters, topic_name)
    flow = flow_of(setup)

    # when
    report = json.loads(ferry("adopt", str(setup), "--flow", mm1_flow(setup), "--from", "mm1",
                              "--group", group, "--settle", "1", "--execute", "--json").stdout)

    # then: Ferry continues after the 530 copied, not at the group's 500
    parts = report["partitions"]
    assert sum(p["position"] for p in parts) == 530
    assert sum(p["progress"] for p in parts) == 500
    assert sum(p["after_progress"] for p in parts) == 30
    assert sum(p["to_copy"] for p in parts) == 20
    done = json.loads(ferry("mirror", str(setup), "--flow", mm1_flow(setup), "--master",
                            connect_url, "--json").stdout)
    assert done["steps"]["record"]["records"] == 20
    assert list(done["steps"]["record"]["topics"]) == [topic_name]
    assert_exact(flow, clusters, topic_name, 2)


def flow_of(setup: Path) -> Flow:
    from ferry.config import load_config

    return load_config(setup).flow(mm1_flow(setup))


def test_adopt_refuses_while_the_old_mirrors_progress_moves(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    group = f"{topic_name}-moving"
    setup = mm1_of_one_partition(clusters, topic_name, tmp_path)
    commit_group(clusters["source"], group, topic_name, {0: 3})
    adopt = subprocess.Popen([sys.executable, "-m", "ferry.cli.main", "adopt", str(setup),
                              "--flow", mm1_flow(setup), "--from", "mm1", "--group", group,
                              "--settle", "8", "--execute"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    commit_group(clusters["source"], group, topic_name, {0: 7})  # the old mirror still runs
    out, err = adopt.communicate(timeout=120)
    assert adopt.returncode == 1, out + err
    assert f"progress still moves ({topic_name}-0 (3 -> 7))" in err
    assert "Traceback" not in err
    assert positions(clusters, flow_of(setup), [(topic_name, 0)]) == [-1001]






def mm1_of_one_partition(clusters: dict[str, str], topic_name: str, tmp_path: Path
                         ) -> Path:
    """A one-partition topic of 10 records and an MM1 command line mirroring it."""
    from tests.support.mm1 import command_line

    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(b"k", b"v", 0)] * 10)
    return command_line(tmp_path, clusters, topic_name)


def test_adopt_refuses_while_the_old_mirrors_group_has_members(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    group = f"{topic_name}-running"
    setup = mm1_of_one_partition(clusters, topic_name, tmp_path)
    member = Consumer(conf(clusters["source"], **{"group.id": group,
                                                  "auto.offset.reset": "earliest"}))
    member.subscribe([topic_name])
    try:
        wait_for(lambda: bool(member.consume(10, 0.5)) and bool(member.assignment()),
                 "the old mirror's consumer to join")
        member.commit(asynchronous=False)
        done = ferry("adopt", str(setup), "--flow", mm1_flow(setup), "--from", "mm1",
                     "--group", group, "--settle", "0", "--execute", check=False)
    finally:
        member.close()
    assert done.returncode == 1, done.stdout + done.stderr
    source = flow_of(setup).source  # the source cluster is named after the setup
    assert (f"MirrorMaker 1 (group {group} on {source}) still run (1 members, group state "
            "Stable): stop them first, then adopt") in done.stderr
    assert positions(clusters, flow_of(setup), [(topic_name, 0)]) == [-1001]


@pytest.mark.parametrize("remote_partitions", [1, 4])
def test_a_remote_topic_with_other_partitions_is_not_adopted(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, remote_partitions: int
) -> None:
    from tests.support.mm1 import command_line

    # given: MM1 mirrored a 2-partition topic into a topic of another partition count (its
    # producer chose the partition: with 4, remote partition 0 holds the half of source
    # partition 0 whose keys hash there, and other partitions' records)
    create_topic(clusters["source"], topic_name, 2)
    create_topic(clusters["target"], topic_name, remote_partitions)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), b"v", i % 2) for i in range(20)])
    produce(clusters["target"], topic_name, [(f"k{i}".encode(), b"v", i % remote_partitions)
                                             for i in range(20)])
    group = f"{topic_name}-mm1"
    commit_group(clusters["source"], group, topic_name, {0: 10, 1: 10})
    setup = command_line(tmp_path, clusters, topic_name)

    done = ferry("adopt", str(setup), "--flow", mm1_flow(setup), "--from", "mm1", "--group",
                 group, "--settle", "0", "--execute", "--json", check=False)

    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert [(p["partition"], p["status"]) for p in report["partitions"]] == [
        (0, "partitions-differ"), (1, "partitions-differ")]
    assert report["partitions"][0]["reason"] == (
        f"{topic_name} has {remote_partitions} partitions, {topic_name} 2: partition 0 was "
        "not mirrored to partition 0")
    assert positions(clusters, flow_of(setup), [(topic_name, 0)]) == [-1001]


def copy_uncommitted(clusters: dict[str, str], topic: str, partition: int,
                     order: list[int] | None = None) -> int:
    """Copy the source partition's records to the same-named remote partition as MM1 (and
    MM2) read them, uncommitted ones too: all in order, or those at the indexes `order`
    gives (a replay repeats some); how many were written."""
    consumer = Consumer(conf(clusters["source"], **{
        "group.id": f"{topic}-peek", "isolation.level": "read_uncommitted",
        "enable.auto.commit": False, "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, partition, 0)])
    read = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "the source partition's end never came"
            if msg.error() is not None:
                break
            read.append(msg)
    finally:
        consumer.close()
    producer = Producer(conf(clusters["target"], **{"enable.idempotence": True}))
    picked = [read[i] for i in order] if order is not None else read
    for msg in picked:
        producer.produce(topic, msg.value(), msg.key(), partition=partition,
                         timestamp=msg.timestamp()[1], headers=msg.headers())
    assert producer.flush(30) == 0
    return len(picked)


def copied_with_an_open_transaction(clusters: dict[str, str], topic: str, value: bytes
                                    ) -> Producer:
    """A one-partition topic of 10 committed records and 5 (of `value`) in a transaction
    left open, all 15 copied to its remote partition as MM1 read them (uncommitted too);
    the transaction's producer."""
    create_topic(clusters["source"], topic, 1)
    create_topic(clusters["target"], topic, 1)
    produce(clusters["source"], topic, [(f"k{i}".encode(), b"v", 0) for i in range(10)])
    txn = Producer(conf(clusters["source"], **{"transactional.id": f"{topic}-txn"}))
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(5):
        txn.produce(topic, value, f"t{i}".encode(), partition=0)
    assert txn.flush(30) == 0
    assert copy_uncommitted(clusters, topic, 0) == 15
    return txn


def test_adopt_waits_for_an_open_transaction_whose_records_the_old_mirror_copied(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from tests.support.mm1 import command_line

    # given: 10 committed records and a transaction of 5 still open on the source; an
    # MM1-style mirror (read_uncommitted, as MM1 and MM2 read) copied all 15 and committed
    # its group at 15
    open_txn = copied_with_an_open_transaction(clusters, topic_name, b"t")
    group = f"{topic_name}-mm1"
    commit_group(clusters["source"], group, topic_name, {0: 15})
    setup = command_line(tmp_path, clusters, topic_name)
    adopt = ("adopt", str(setup), "--flow", mm1_flow(setup), "--from", "mm1", "--group", group,
             "--settle", "0", "--execute", "--json")

    # when: adopted while the transaction is open
    done = ferry(*adopt, check=False)

    # then: not adopted (Ferry would continue at 10 and copy the 5 again once committed),
    # and nothing written
    assert done.returncode == 1, done.stdout + done.stderr
    (part,) = json.loads(done.stdout)["partitions"]
    assert part["status"] == "open-transaction", part
    assert part["reason"] == (
        f"{topic_name}-0 has a transaction open from offset 10 (its end is 15), and "
        f"{topic_name}-0 holds 5 records after the last one paired, among them copies of "
        "records of that transaction (the old mirror read uncommitted records): adopt again "
        "once it is committed or aborted")
    assert positions(clusters, flow_of(setup), [(topic_name, 0)]) == [-1001]

    # when: the transaction commits, and adopt runs again
    open_txn.commit_transaction(30)
    again = json.loads(ferry(*adopt).stdout)

    # then: all 15 copies pair, and Ferry continues after them
    (part,) = again["partitions"]
    assert (part["status"], part["position"], part["matched"], part["to_copy"]) == (
        "adopted", 15, 15, 0), part  # (the commit marker at 15 is skipped as any)
    assert positions(clusters, flow_of(setup), [(topic_name, 0)]) == [15]


def test_adopt_does_not_wait_for_an_open_transaction_the_old_mirror_copied_nothing_of(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from tests.support.mm1 import command_line

    # given: 10 committed records and 5 of a transaction an MM1-style mirror copied (reading
    # uncommitted) before it was aborted; the group committed at 15; then, the mirror
    # stopped, a new transaction opened on the source (as a Kafka Streams source always has
    # one open), of which the mirror copied nothing
    txn = copied_with_an_open_transaction(clusters, topic_name, b"aborted")
    txn.abort_transaction(30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic_name, b"open", f"o{i}".encode(), partition=0)
    assert txn.flush(30) == 0
    group = f"{topic_name}-mm1"
    commit_group(clusters["source"], group, topic_name, {0: 15})
    setup = command_line(tmp_path, clusters, topic_name)

    # when
    report = json.loads(ferry("adopt", str(setup), "--flow", mm1_flow(setup), "--from", "mm1",
                              "--group", group, "--settle", "0", "--execute", "--json").stdout)

    # then: adopted at once: the 5 unpaired copies are of aborted records, not of the open
    # transaction, so no wait can pair them; they are reported as extra
    (part,) = report["partitions"]
    assert (part["status"], part["position"], part["matched"], part["extra"]) == (
        "adopted", 10, 10, 5), part
    assert positions(clusters, flow_of(setup), [(topic_name, 0)]) == [10]
    txn.commit_transaction(30)


def test_a_replay_longer_than_the_window_is_not_adopted(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from tests.support.mm1 import command_line

    # given: a mirror copied records 0-59, restarted from 30 (a replay of 30 records),
    # copied on to 99 and committed its group at 100
    create_topic(clusters["source"], topic_name, 1)
    create_topic(clusters["target"], topic_name, 1)
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
    produce(clusters["source"], topic_name, [(k, v, 0) for k, v in records])
    copy_uncommitted(clusters, topic_name, 0,
                     [*range(60), *range(30, 60), *range(60, 100)])
    group = f"{topic_name}-mm1"
    commit_group(clusters["source"], group, topic_name, {0: 100})
    setup = command_line(tmp_path, clusters, topic_name)

    # when: adopted with a window shorter than the replay
    done = ferry("adopt", str(setup), "--flow", mm1_flow(setup), "--from", "mm1", "--group",
                 group, "--settle", "0", "--window", "10", "--execute", "--json", check=False)

    # then: not adopted: after record 59 the two sides never pair again, though the old
    # mirror's progress counts 60-99 as copied (Ferry would copy them a second time)
    assert done.returncode == 1, done.stdout + done.stderr
    (part,) = json.loads(done.stdout)["partitions"]
    assert part["status"] == "not-aligned", part
    assert part["reason"] == (
        "40 records the old mirror's progress counts as copied (from offset 60) do not pair "
        "with the records after the last paired copy: the alignment lost step (a replay or a "
        "hole longer than --window 10: raise it), or the remote partition holds other records")
    assert positions(clusters, flow_of(setup), [(topic_name, 0)]) == [-1001]
    # and with a window longer than the replay it is adopted: the replay reported as doubled
    again = json.loads(ferry("adopt", str(setup), "--flow", mm1_flow(setup), "--from", "mm1",
                             "--group", group, "--settle", "0", "--window", "100",
                             "--execute", "--json").stdout)
    (part,) = again["partitions"]
    assert (part["status"], part["position"], part["matched"], part["doubled"]) == (
        "adopted", 100, 100, 30), part


def test_adopt_stops_before_writing_a_partition_ferry_began_mirroring_meanwhile(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferry.core.internal import positions_group
    from ferry.errors import TerminalError
    from ferry.steps import adopt as adopt_step

    # given: an MM1-style mirror copied the 20 records of a partition and committed them
    flow, group = mm1_copied_twenty(clusters, topic_name, tmp_path)
    # and a flow run (its DAG was not paused) commits a position there while the adoption
    # aligns the partition, after adopt found no position of Ferry's
    aligning = adopt_step.align

    def align_while_a_run_commits(*args: object, **kwargs: object) -> object:
        commit_group(clusters["target"], positions_group(flow), topic_name, {0: 7})
        return aligning(*args, **kwargs)

    monkeypatch.setattr(adopt_step, "align", align_while_a_run_commits)

    # when
    with pytest.raises(TerminalError) as refused:
        adopt_step.adopt(flow, "mm1", group=group, settle_s=0, execute=True)

    # then: it stopped before writing, naming the partition, and the run's position stands
    assert str(refused.value) == (
        f"flow {flow.name}: Ferry began mirroring {topic_name}-0 during the adoption (a "
        "position at 7, committed by another client): nothing of it was written; pause the "
        "flow's DAG, and adopt only partitions Ferry has not mirrored")
    assert positions(clusters, flow, [(topic_name, 0)]) == [7]
    # (MM1 setups share their flow's aliases, so its offset map has other tests' entries)
    assert [e for r in read_all(clusters["target"], offset_map_topic(flow), 0)
            if r.value is not None and (e := decode(r.value)).source_topic == topic_name] == []


def test_adopt_fences_a_run_still_inside_its_first_transaction_on_the_partition(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from ferry.core.planner import Range
    from ferry.kafka.admin import Admin
    from ferry.kafka.topology import ensure_offset_map_topic
    from ferry.steps import adopt as adopt_step

    # given: an MM1-style mirror copied the 20 records of a partition and committed them
    flow, group = mm1_copied_twenty(clusters, topic_name, tmp_path)
    ensure_offset_map_topic(flow, Admin(flow.target_admin))
    # and a run of the flow (its DAG not paused) copying the partition from its start, its
    # records sent in its first transaction, not committed: invisible to a stable read
    run, _, release, failure = paused_writer(
        flow, [Range(topic_name, 0, 0, 20, expect=None)], "not-paused", "commit")

    # when: the adoption runs meanwhile, then the run goes on
    report = adopt_step.adopt(flow, "mm1", group=group, settle_s=0, execute=True)
    release.set()
    run.thread.join(60)  # type: ignore[attr-defined]

    # then: adopted at 20; the run was fenced (its records aborted, its commit refused), so
    # the remote partition holds the old mirror's 20 records once
    (part,) = report.partitions
    assert (part.status, part.position) == ("adopted", 20)
    assert len(failure) == 1 and "was taken by a newer writer" in str(failure[0])
    assert positions(clusters, flow, [(topic_name, 0)]) == [20]
    assert len(read_all(clusters["target"], topic_name, 0)) == 20


def mm1_copied_twenty(clusters: dict[str, str], topic_name: str, tmp_path: Path
                      ) -> tuple[Flow, str]:
    """An MM1-style mirror that copied the 20 records of a one-partition topic to the
    same-named topic and committed them in its group: the flow of its setup, the group."""
    from tests.support.mm1 import command_line

    create_topic(clusters["source"], topic_name, 1)
    create_topic(clusters["target"], topic_name, 1)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), b"v", 0) for i in range(20)])
    copy_uncommitted(clusters, topic_name, 0)
    group = f"{topic_name}-mm1"
    commit_group(clusters["source"], group, topic_name, {0: 20})
    return flow_of(command_line(tmp_path, clusters, topic_name)), group

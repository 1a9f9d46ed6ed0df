"""Shared pieces of the benchmarks: fresh local clusters, fast data generation, timing."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import Pool
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ferry.local import cluster

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def local_clusters(root: Path) -> Iterator[dict[str, str]]:
    cluster.down(root, wipe=True)
    states = cluster.up(("source", "target"), root)
    try:
        yield {s.alias: s.bootstrap for s in states}
    finally:
        cluster.down(root, wipe=True)


@contextmanager
def work_dir(given: Path | None, prefix: str) -> Iterator[Path]:
    """The benchmark's work directory: `given` (`--dir`, kept afterwards), else a
    temporary one, removed afterwards."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given.resolve()
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        yield Path(name)


def create_topic(bootstrap: str, name: str, partitions: int,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})  # no BGQUEUE lines
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(60)


def _produce_part(args: tuple[str, str, list[int], int, int, bool]) -> int:
    bootstrap, topic, partitions, count, size, transactional = args
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 20,
                               "batch.size": 1_000_000, "enable.idempotence": True,
                               "log_level": 3}
    if transactional:
        conf["transactional.id"] = f"bench-{topic}-{partitions[0]}"
    producer = Producer(conf)
    value = b"x" * size
    if transactional:
        producer.init_transactions(60)
        producer.begin_transaction()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, f"k{i}".encode(),
                                 partition=partitions[i % len(partitions)])
                break
            except BufferError:
                producer.poll(0.05)
        if transactional and i % 200_000 == 199_999:
            producer.commit_transaction(60)
            producer.begin_transaction()
    if transactional:
        producer.commit_transaction(60)
    assert producer.flush(120) == 0
    return count


def produce(bootstrap: str, topic: str, partitions: int, records: int, size: int,
            processes: int = 2, transactional: bool = False) -> float:
    """Write `records` records of `size` bytes; returns the seconds it took."""
    parts = [list(range(partitions))[i::processes] for i in range(processes)]
    jobs = [(bootstrap, topic, p, records // processes, size, transactional) for p in parts]
    started = time.monotonic()
    with Pool(processes) as pool:
        pool.map(_produce_part, jobs)
    return time.monotonic() - started


def _consume_part(args: tuple[str, str, list[int], int]) -> int:
    from confluent_kafka import Consumer, TopicPartition

    bootstrap, topic, partitions, expected = args
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "log_level": 3})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen = 0
    while seen < expected:
        seen += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    consumer.close()
    return seen


def consume(bootstrap: str, topic: str, partitions: int, records: int,
            processes: int = 2) -> float:
    parts = [list(range(partitions))[i::processes] for i in range(processes)]
    jobs = [(bootstrap, topic, p, records // processes) for p in parts]
    started = time.monotonic()
    with Pool(processes) as pool:
        pool.map(_consume_part, jobs)
    return time.monotonic() - started


def write_config(path: Path, clusters: dict[str, str], topics: str, state: Path,
                 extra: str = "", source: str = "source") -> str:
    """A flow `<source>->target` (another `source` alias: another remote topic, positions
    group and offset map on the same clusters)."""
    path.write_text(
        f"clusters = {source}, target\n{source}.bootstrap.servers = {clusters['source']}\n"
        f"target.bootstrap.servers = {clusters['target']}\n{source}->target.enabled = true\n"
        f"{source}->target.topics = {topics}\nreplication.factor = 1\n"
        "checkpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\n"
        f"ferry.state.dir = {state}\n" + extra)
    return str(path)


def ferry_mirror(config: str, flow: str = "source->target") -> tuple[float, dict[str, object]]:
    """One `ferry mirror` cycle; (wall seconds, its --json result)."""
    started = time.monotonic()
    result = subprocess.run([str(Path(sys.executable).parent / "ferry"), "mirror", config,
                             "--flow", flow, "--json"], capture_output=True,
                            text=True, check=False)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"ferry mirror failed (exit {result.returncode}):\n"
                         f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return seconds, json.loads(result.stdout)


def rate(records: int, size: int, seconds: float) -> str:
    return (f"{records / seconds:>10,.0f} records/s  {records * size / seconds / 1e6:>7.1f} MB/s"
            f"  ({seconds:.1f} s)")


def _bare_copy_part(args: tuple[str, str, str, str, list[int], int, int]) -> int:
    """One process of the bare loop: its partitions, read_committed from offset 0, written
    to the same partitions of `dest` in transactions of `per_txn` records."""
    from confluent_kafka import Consumer, TopicPartition

    source, target, topic, dest, partitions, expected, per_txn = args
    consumer = Consumer({"bootstrap.servers": source, "group.id": f"bare-{dest}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                         "log_level": 3})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    producer = Producer({"bootstrap.servers": target, "linger.ms": 20,
                         "batch.size": 1_000_000, "log_level": 3,
                         "transactional.id": f"bare-{dest}-{partitions[0]}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    copied = in_txn = 0
    while copied < expected:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is not None:
                continue
            while True:
                try:
                    producer.produce(dest, m.value(), m.key(), partition=m.partition() or 0,
                                     timestamp=m.timestamp()[1], headers=m.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
            in_txn += 1
            if in_txn == per_txn:
                producer.commit_transaction(60)
                producer.begin_transaction()
                in_txn = 0
    producer.commit_transaction(60)
    consumer.close()
    return copied


def bare_copy(clusters: dict[str, str], topic: str, dest: str, partitions: int, records: int,
              processes: int = 2, per_txn: int = 50_000) -> float:
    """The bare transactional copy loop (confluent-kafka, one process per core, no
    bookkeeping): the ceiling a mirror's copy is measured against. Seconds it took."""
    create_topic(clusters["target"], dest, partitions)
    parts = [list(range(partitions))[i::processes] for i in range(processes)]
    jobs = [(clusters["source"], clusters["target"], topic, dest, p, records // processes,
             per_txn) for p in parts]
    started = time.monotonic()
    with Pool(processes) as pool:
        pool.map(_bare_copy_part, jobs)
    return time.monotonic() - started


def mm2_dedicated(tmp: Path, clusters: dict[str, str], alias: str, topics: str,
                  tasks: int = 4, extra: str = "") -> subprocess.Popen[bytes]:
    """MirrorMaker 2 in dedicated mode (the `connect-mirror` jars Ferry fetches from Maven
    Central) mirroring `topics` from the source cluster, named `alias`, to the target.
    `extra`: more properties (later ones win)."""
    from ferry.jars import kafka_jars, log4j_config

    config = tmp / f"mm2-{alias}.properties"
    config.write_text(
        f"clusters = {alias}, target\n{alias}.bootstrap.servers = {clusters['source']}\n"
        f"target.bootstrap.servers = {clusters['target']}\n{alias}->target.enabled = true\n"
        f"{alias}->target.topics = {topics}\ntarget->{alias}.enabled = false\n"
        "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
        "offset.storage.replication.factor = 1\nstatus.storage.replication.factor = 1\n"
        f"config.storage.replication.factor = 1\ntasks.max = {tasks}\n"
        "sync.topic.acls.enabled = false\nemit.checkpoints.enabled = false\n" + extra)
    java = ["java", "-Xmx1g", f"-Dlog4j2.configurationFile={log4j_config()}", "-cp",
            f"{kafka_jars()}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(config),
            "--clusters", "target"]
    log = open(tmp / f"mm2-{alias}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(java, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of the topic's end offsets (0 while it does not exist or is being created)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends",
                         "log_level": 0})
    try:
        if topic not in consumer.list_topics(timeout=5).topics:
            return 0
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                   for p in range(partitions))
    except KafkaException:  # just created: leaders not elected yet
        return 0
    finally:
        consumer.close()

"""A rolling restart of both clusters under a live stream, Ferry and MirrorMaker 2 (dedicated
mode, from the Kafka jars Ferry fetches) mirroring it side by side.

    .venv/bin/python bench/bounce.py [--rate 300] [--warmup 20] [--dir DIR]

Two local clusters of three KRaft nodes each (replication factor 3, min ISR 2, the brokers
fencing a silent node after 3 s) and a local Spark Connect server. A producer thread
writes numbered records (idempotent, acks=all) round-robin over the 3 partitions of
`stream` at `--rate` records/s. `ferry mirror --continuous` on the warm server mirrors them
as flow `source->target` (remote topic `source.stream`), MM2 as `mm2src->target`
(`mm2src.stream`) into the same target cluster; every topic either creates has 3 replicas.

Once Ferry has finished a cycle, MM2 has copied records and `--warmup` more seconds have
passed, every target node, then every source node, is restarted twice, hard (SIGKILL) then
clean (SIGTERM), one at a time, each time waiting until every partition is fully replicated
again: 12 bounces. A minimal service manager watches both mirrors' processes and starts one
again at once when it exits (counted: Ferry's continuous run is meant never to need it).
Then the stream stops, both mirrors catch up (Ferry: a cycle started after the stream
stopped finds nothing to copy; MM2: every record arrived and nothing more for 10 s; at most
5 minutes) and stop.

Each remote topic is then read back (read_committed) and compared with the source, per
partition: records lost, records doubled (extra copies), records in order (the remote
sequence, duplicates dropped, equals the source's). A reader following both remote topics
during the run gives how far behind each mirror was at worst: a record's first arrival on
the target minus its CreateTime, over the records produced after the warm-up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import mm2_dedicated, work_dir, write_config
from ferry.local import cluster, spark_server

TOPIC = "stream"
PARTITIONS = 3
REPLICAS = 3
MM2_ALIAS = "mm2src"
FERRY_REMOTE = f"source.{TOPIC}"
MM2_REMOTE = f"{MM2_ALIAS}.{TOPIC}"
BOUNCE_TIMEOUT_S = 300.0
"""How long one bounce may take (node away, back, every partition in sync) on a busy box."""
START_TIMEOUT_S = 300.0
CATCH_UP_TIMEOUT_S = 300.0
QUIET_S = 10.0
"""MM2 has caught up once every record arrived and nothing more came for this long."""

FERRY_TOPICS = (f"replication.factor = {REPLICAS}\n"
                f"checkpoints.topic.replication.factor = {REPLICAS}\n"
                f"heartbeats.topic.replication.factor = {REPLICAS}\n")
"""Ferry's config lines giving its remote topic, offset map, checkpoints and heartbeats
topics 3 replicas (bench.common.write_config's defaults are for one-node clusters)."""

MM2_TOPICS = FERRY_TOPICS + "".join(
    f"{key}.replication.factor = {REPLICAS}\n"
    for key in ("offset-syncs.topic", "offset.storage", "status.storage", "config.storage"))
"""The same for MM2, with its Connect internal topics and its offset-syncs topic."""


def bounce(root: Path, alias: str, node_id: int, hard: bool) -> float:
    """One step of the rolling restart (`cluster.bounce_node`); the seconds it took."""
    return cluster.bounce_node(root, alias, node_id, hard, BOUNCE_TIMEOUT_S)


class Stream(threading.Thread):
    """Writes records numbered 0, 1, ... (value and key the number, partition number % 3)
    at about `rate` per second until `stop`, with an idempotent producer (acks=all) that
    rides through the source's bounces; then flushes. `started` is how many it had handed
    to the producer so far, `failed` how many the source never took."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.rate, self.started, self.failed = rate, 0, 0
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5, "log_level": 0})

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.failed += 1

    def run(self) -> None:
        began = time.monotonic()
        while not self.stop.is_set():
            number = str(self.started).encode()
            try:
                self.producer.produce(TOPIC, number, number,
                                      partition=self.started % PARTITIONS,
                                      on_delivery=self._delivered)
            except BufferError:  # the source away long enough to fill the local queue
                self.producer.poll(0.1)
                continue
            self.started += 1
            self.producer.poll(0)
            ahead = self.started / self.rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
        self.producer.flush(300)


class Follower(threading.Thread):
    """Reads one remote topic (read_committed) from the start while the mirrors run: each
    record number's first arrival, as seconds behind its CreateTime, and how many records
    arrived in all (copies included) and when the last did."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.behind: dict[int, float] = {}
        self.arrived, self.last_arrival = 0, time.monotonic()
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bounce-{topic}",
                                  "isolation.level": "read_committed",
                                  "enable.auto.commit": False, "log_level": 0,
                                  "topic.metadata.refresh.interval.ms": 1000})

    def run(self) -> None:
        assigned = False
        while not self.stop.is_set():
            if not assigned:
                try:
                    topics = self.consumer.list_topics(timeout=5).topics
                except KafkaException:
                    topics = {}
                if self.topic not in topics:
                    time.sleep(0.5)
                    continue
                self.consumer.assign([TopicPartition(self.topic, p, 0)
                                      for p in range(PARTITIONS)])
                assigned = True
            for msg in self.consumer.consume(1000, 0.2):
                value = msg.value()
                if msg.error() is None and value is not None:
                    number = int(value)
                    self.arrived += 1
                    self.last_arrival = time.monotonic()
                    self.behind.setdefault(number, time.time() - msg.timestamp()[1] / 1000)
        self.consumer.close()


class Supervised:
    """A mirror's process under a minimal service manager: `launch()` starts it (in a
    session of its own); a watcher thread starts it again at once whenever it exits before
    `stop`, and keeps each such exit as (seconds since the bench started it, exit code)."""

    def __init__(self, name: str, launch: Callable[[], subprocess.Popen[bytes]]) -> None:
        self.name, self.launch = name, launch
        self.exits: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.began = time.monotonic()
        self.process = launch()
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()

    def _watch(self) -> None:
        while not self.stopping.wait(1.0):
            with self.lock:
                code = self.process.poll()
                if code is None or self.stopping.is_set():
                    continue
                self.exits.append((time.monotonic() - self.began, code))
                print(f"    {self.name} exited with {code}; started again", flush=True)
                self.process = self.launch()

    @property
    def restarts(self) -> int:
        return len(self.exits)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM its process group (no restart from now on), SIGKILL after `grace_s`;
        the exit code (None when it had to be killed)."""
        self.stopping.set()
        with self.lock:
            process = self.process
        if process.poll() is not None:
            return process.returncode
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            return process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
            return None


def ferry_launcher(config: str, master: str, work: Path) -> Callable[[], subprocess.Popen[bytes]]:
    """Starts `ferry mirror --continuous --json` on the warm server, its cycle reports
    appended to `cycles.jsonl`, its stderr to `ferry.err`."""
    ferry = str(Path(sys.executable).parent / "ferry")

    def launch() -> subprocess.Popen[bytes]:
        with open(work / "cycles.jsonl", "ab") as out, open(work / "ferry.err", "ab") as err:
            return subprocess.Popen([ferry, "mirror", config, "--flow", "source->target",
                                     "--continuous", "--master", master, "--json"],
                                    stdout=out, stderr=err, start_new_session=True)
    return launch


def mm2_launcher(work: Path, clusters: dict[str, str]) -> Callable[[], subprocess.Popen[bytes]]:
    """Starts MM2 (dedicated mode); a restart first moves the previous log aside
    (`mm2-mm2src.log.<n>`), as `mm2_dedicated` truncates it."""
    starts: list[int] = []

    def launch() -> subprocess.Popen[bytes]:
        log = work / f"mm2-{MM2_ALIAS}.log"
        if starts and log.exists():
            log.rename(log.with_name(f"{log.name}.{len(starts)}"))
        starts.append(len(starts))
        return mm2_dedicated(work, clusters, MM2_ALIAS, TOPIC, extra=MM2_TOPICS)
    return launch


def cycles(work: Path) -> list[dict[str, object]]:
    """Ferry's cycle reports so far, across its restarts."""
    path = work / "cycles.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def failed(report: dict[str, object]) -> bool:
    """A cycle that did not finish cleanly: abandoned as hung or its copy job failed."""
    return bool(report.get("abandoned")) or report.get("job_exit_code", 0) != 0


def read_partition(bootstrap: str, topic: str, partition: int) -> list[int]:
    """The record numbers of one partition, read_committed, from its start to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bounce-compare",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 0})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        if high <= low:
            return []
        consumer.assign([TopicPartition(topic, partition, low)])
        numbers: list[int] = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return numbers
                    raise RuntimeError(f"reading {topic}-{partition}: {err}")
                numbers.append(int(msg.value() or b"-1"))  # every record has a number
        raise RuntimeError(f"reading {topic}-{partition} timed out")
    finally:
        consumer.close()


@dataclass(frozen=True)
class Tally:
    """How a remote topic compares with the source, summed over the partitions."""

    copies: int
    lost: int
    doubled: int
    foreign: int
    in_order: bool


def compare(source: list[list[int]], remote: list[list[int]]) -> Tally:
    """Per partition: `lost` records of the source missing from the remote, `doubled`
    extra copies, `foreign` records the source partition does not hold; `in_order` when the
    remote sequence with later copies dropped equals the source's."""
    lost = doubled = foreign = 0
    in_order = True
    for want, got in zip(source, remote, strict=True):
        present, expected = set(got), set(want)
        lost += len(expected - present)
        doubled += len(got) - len(present)
        foreign += len(present - expected)
        in_order &= list(dict.fromkeys(got)) == want
    return Tally(sum(map(len, remote)), lost, doubled, foreign, in_order)


def log_counts(path: Path, marks: dict[str, str]) -> str:
    """How many lines of the log at `path` (and its moved-aside copies) match each of
    `marks` (label -> regular expression), and the last line matching the last mark that
    any line matches (the most severe, marks listed from the least)."""
    lines = [line for p in sorted(path.parent.glob(path.name + "*")) if p.is_file()
             for line in p.read_text(errors="replace").splitlines()]
    found = {label: [line for line in lines if re.search(mark, line)]
             for label, mark in marks.items()}
    text = ", ".join(f"{len(hits)} {label}" for label, hits in found.items())
    worst = [(label, hits[-1]) for label, hits in found.items() if hits]
    return text + (f"; last {worst[-1][0]}: {worst[-1][1][:240]}" if worst else "")


@contextlib.contextmanager
def replicated_clusters(root: Path) -> Iterator[dict[str, str]]:
    """alias -> bootstrap of fresh `source` and `target` clusters of three nodes each;
    stopped and wiped on exit."""
    cluster.down(root, wipe=True)
    try:
        states = cluster.up(("source", "target"), root, brokers=3,
                            extra=cluster.FAST_FAILURE_DETECTION)
        yield {s.alias: s.bootstrap for s in states}
    finally:
        cluster.down(root, wipe=True)


def wait_until(what: str, done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def worst_behind(follower: Follower, since: int) -> str:
    late = [s for n, s in follower.behind.items() if n >= since]
    return f"{max(late):.1f}" if late else "-"


@dataclass(frozen=True)
class Mirrored:
    """A stream mirrored by Ferry (and MirrorMaker 2) between two replicated clusters."""

    root: Path
    """The clusters' directory (for `bounce`)."""
    clusters: dict[str, str]
    server: Any
    """The local Spark Connect server Ferry copies through."""
    stream: Stream
    followers: dict[str, Follower]
    """Mirror name -> a reader of its remote topic."""
    ferry: Supervised
    mm2: Supervised | None


def mirrored_stream(stack: contextlib.ExitStack[Any], work: Path, rate: int,
                    with_mm2: bool = True) -> Mirrored:
    """Two clusters of three nodes under `work/kafka` and `stream` on the source, a Spark
    Connect server under `work/spark`, the stream at `rate` records/s, a follower of each
    mirror's remote topic, and the mirrors started under their service managers (Ferry,
    and MM2 with `with_mm2`); `stack` stops them all, in reverse."""
    root = work / "kafka"
    clusters = stack.enter_context(replicated_clusters(root))
    admin = AdminClient({"bootstrap.servers": clusters["source"], "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, REPLICAS)])[TOPIC].result(60)
    del admin  # its connections would log through the source's bounces
    server = spark_server.up(work / "spark")
    stack.callback(spark_server.down, work / "spark")

    stream = Stream(clusters["source"], rate)
    stream.start()
    stack.callback(stream.join, 330)
    stack.callback(stream.stop.set)
    mirrors = {"ferry": FERRY_REMOTE, **({"mm2": MM2_REMOTE} if with_mm2 else {})}
    followers = {name: Follower(clusters["target"], topic) for name, topic in mirrors.items()}
    for follower in followers.values():
        follower.start()
        stack.callback(follower.join, 10)
        stack.callback(follower.stop.set)

    config = write_config(work / "ferry.properties", clusters, TOPIC, work / "state",
                          FERRY_TOPICS)
    ferry = Supervised("ferry", ferry_launcher(config, server.url, work))
    stack.callback(ferry.stop, 300)
    mm2 = None
    if with_mm2:
        mm2 = Supervised("MM2", mm2_launcher(work, clusters))
        stack.callback(mm2.stop, 60)
    return Mirrored(root, clusters, server, stream, followers, ferry, mm2)


def run(work: Path, rate: int, warmup: float) -> None:
    """The whole bench in `work` (clusters under `work/kafka`, the server under
    `work/spark`, the mirrors' logs beside); prints as it goes, then the table."""
    print(f"bounce: {rate} records/s over {PARTITIONS} partitions (RF {REPLICAS}, min ISR 2); "
          "Ferry continuous and MirrorMaker 2 side by side", flush=True)
    with contextlib.ExitStack() as stack:
        mirrored = mirrored_stream(stack, work, rate)
        root, clusters, stream = mirrored.root, mirrored.clusters, mirrored.stream
        followers, ferry, mm2 = mirrored.followers, mirrored.ferry, mirrored.mm2
        assert mm2 is not None

        wait_until("Ferry's first cycle and MM2's first records",
                   lambda: bool(cycles(work)) and bool(followers["mm2"].behind),
                   START_TIMEOUT_S)
        time.sleep(warmup)
        warm_from = stream.started
        print(f"  both mirroring ({len(cycles(work))} Ferry cycles so far); bouncing from "
              f"record {warm_from:,}", flush=True)

        durations: list[float] = []
        for alias in ("target", "source"):
            (state,) = [s for s in cluster.states_in(root) if s.alias == alias]
            for node in state.nodes:
                for hard in (True, False):
                    before = (len(cycles(work)), ferry.restarts, mm2.restarts)
                    seconds = bounce(root, alias, node.node_id, hard)
                    durations.append(seconds)
                    done = len(cycles(work))
                    print(f"  {alias} node {node.node_id} {'hard ' if hard else 'clean'} "
                          f"{seconds:6.1f} s   Ferry "
                          f"{'running' if ferry.alive() else 'DOWN'}, restarts "
                          f"+{ferry.restarts - before[1]}, cycles {done - before[0]}   MM2 "
                          f"{'running' if mm2.alive() else 'DOWN'}, restarts "
                          f"+{mm2.restarts - before[2]}", flush=True)

        stream.stop.set()
        stream.join(330)
        produced = stream.started
        stopped_at = len(cycles(work))
        settled = time.monotonic()

        def ferry_caught_up() -> bool:
            return any(r.get("idle") for r in cycles(work)[stopped_at + 1:])

        def mm2_caught_up() -> bool:
            mm2_follower = followers["mm2"]
            return (len(mm2_follower.behind) >= produced - stream.failed
                    and time.monotonic() - mm2_follower.last_arrival > QUIET_S)

        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        caught: dict[str, float | None] = {"ferry": None, "mm2": None}
        while time.monotonic() < deadline and None in caught.values():
            for name, check in (("ferry", ferry_caught_up), ("mm2", mm2_caught_up)):
                if caught[name] is None and check():
                    caught[name] = time.monotonic() - settled
            time.sleep(0.5)
        ferry_code, mm2_code = ferry.stop(300), mm2.stop(60)

        source = [read_partition(clusters["source"], TOPIC, p) for p in range(PARTITIONS)]
        tallies = {name: compare(source, [read_partition(clusters["target"], topic, p)
                                          for p in range(PARTITIONS)])
                   for name, topic in (("ferry", FERRY_REMOTE), ("mm2", MM2_REMOTE))}
        reports = cycles(work)

    held = sum(map(len, source))
    print(f"\nrecords produced {produced:,} (the source took {produced - stream.failed:,}, "
          f"holds {held:,}, each once: {'yes' if held == len(set().union(*source)) else 'NO'})")
    print(f"bounces {len(durations)}: " + ", ".join(f"{d:.1f}" for d in durations)
          + f" s (total {sum(durations):.0f} s)")
    print(f"Ferry cycles {len(reports)}, failed {sum(map(failed, reports))}; SIGTERM at the "
          f"end: Ferry exit {ferry_code}, MM2 exit {mm2_code} (None: killed after the grace)")

    def caught_text(name: str) -> str:
        seconds = caught[name]
        return "no" if seconds is None else f"{seconds:.0f} s"

    rows = [
        ("records on the remote topic", *(f"{t.copies:,}" for t in tallies.values())),
        ("records lost", *(f"{t.lost:,}" for t in tallies.values())),
        ("records doubled", *(f"{t.doubled:,}" for t in tallies.values())),
        ("in order", *("yes" if t.in_order else "NO" for t in tallies.values())),
        ("process restarts", str(ferry.restarts), str(mm2.restarts)),
        ("failed cycles", str(sum(map(failed, reports))), "-"),
        ("worst behind (s, after warm-up)", *(worst_behind(f, warm_from)
                                              for f in followers.values())),
        ("caught up after the stream stopped", caught_text("ferry"), caught_text("mm2")),
    ]
    if any(t.foreign for t in tallies.values()):
        rows.append(("records not from the source", *(f"{t.foreign:,}"
                                                      for t in tallies.values())))
    print(f"\n  {'':<36}{'Ferry':>12}{'MirrorMaker 2':>16}")
    for label, ferry_cell, mm2_cell in rows:
        print(f"  {label:<36}{ferry_cell:>12}{mm2_cell:>16}")
    for name, exits in (("Ferry", ferry.exits), ("MM2", mm2.exits)):
        if exits:
            print(f"  {name} exits: " + ", ".join(f"code {c} at {t:.0f} s" for t, c in exits))
    print("  Ferry stderr: " + log_counts(work / "ferry.err", {
        "librdkafka": r"^%\d\|", "WARNING": " WARNING ", "ERROR": " ERROR "}))
    print("  MM2 log: " + log_counts(work / f"mm2-{MM2_ALIAS}.log",
                                     {"WARN": r"\] WARN ", "ERROR": r"\] ERROR "}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=300, help="records/s (default 300)")
    parser.add_argument("--warmup", type=float, default=20,
                        help="seconds both mirrors run before the first bounce (default 20)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work directory, kept with the mirrors' logs (cycles.jsonl, "
                             "ferry.err, mm2-mm2src.log); default: a temporary one")
    args = parser.parse_args()
    with work_dir(args.dir, "ferry-bounce-") as work:
        run(work, args.rate, args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End-to-end latency of a steady stream: Ferry on a warm Spark, and MirrorMaker 2
(dedicated mode, from the Kafka jars Ferry fetches) in the same run.

    .venv/bin/python bench/latency.py [--mode cli|continuous|schedule] [--seconds 180]
                                      [--rate 200 | --rate bare:0.5] [--warmup 60]
                                      [--no-mm2]

A producer writes `--rate` records/s (each value its sequence number) over 4 partitions
for `--seconds`. `--rate bare:F` first measures the bare transactional copy loop
(confluent-kafka, one process per core, no bookkeeping) on 200,000 records of the same
size on the same clusters, and streams at F times its rate. Ferry mirrors them as flow
`source->target` through a local Spark Connect server, MM2 as `mm2src->target`, into the
same target cluster (`--no-mm2` leaves MM2 out, for rates that two mirrors and the stream
cannot share on a small machine). `--mode` says how Ferry runs:

- `cli`: `ferry mirror --continuous`, one process;
- `continuous`: the flow's DAG with `ferry.schedule = @continuous` under a real Airflow
  scheduler (api-server, scheduler with the LocalExecutor, dag-processor, as `airflow
  standalone` runs them; `ferry.continuous.run.seconds = 300`, so runs end and start again
  during the measurement), its `spark_default` connection of type `spark_connect`;
- `schedule`: the same Airflow, the DAG every minute (`ferry.schedule = * * * * *`).

`--spark submit` (Airflow modes) makes `spark_default` spark `local[*]`, what a scheduled
DR sync gets out of the box: a run copies through spark-submit, or, for a plan of at most
`ferry.copy.local.max.records`, on the local runner in its `cycle` task.

A reader follows both remote topics (read_committed) and takes each record's latency as its
arrival time minus its CreateTime (both mirrors keep it). Records produced during
`--warmup` are left out of the percentiles; all are counted for lost and doubled. Printed
too: the rate each mirror delivered while the stream ran and how far behind it was when
the stream stopped; with `cli`, where a cycle's time goes (its parts, from each cycle's
`timings`: start = heartbeat, sync and plan; copy = the lanes; finish = record and
checkpoints); under Airflow, the DAG runs' durations and task processes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.common import create_topic, local_clusters, mm2_dedicated, write_config
from ferry.local import spark_server
from tests.scheduler.stack import Airflow, running

PARTITIONS = 4
TOPIC = "stream"
DAG_ID = "ferry_source_to_target"
SCHEDULES = {"continuous": "ferry.schedule = @continuous\nferry.continuous.run.seconds = 300\n",
             "schedule": "ferry.schedule = * * * * *\n"}
LABELS = {"cli": "ferry mirror --continuous", "continuous": "Ferry DAG, @continuous",
          "schedule": "Ferry DAG, every minute"}


SIZE = 16
"""Bytes per record value: its sequence number, zero-padded."""


def value(sequence: int) -> bytes:
    return f"{sequence:0{SIZE}d}".encode()


def stream(bootstrap: str, rate: float, seconds: float, stop: threading.Event) -> int:
    """Write `rate` records/s for `seconds`; returns how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    started, sent = time.monotonic(), 0
    while not stop.is_set() and time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            try:
                producer.produce(TOPIC, value(sent), partition=sent % PARTITIONS)
            except BufferError:  # the producer's queue is full: let it drain
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)
    return sent


BARE_RECORDS = 200_000


def bare_rate(clusters: dict[str, str]) -> float:
    """Records/s of the bare transactional copy loop on BARE_RECORDS records of the
    stream's size, over the stream's partitions, on these clusters."""
    from multiprocessing import Pool

    from bench.common import bare_copy

    create_topic(clusters["source"], "bare-source", PARTITIONS)
    with Pool(2) as pool:
        pool.map(_fill, [(clusters["source"], p) for p in range(PARTITIONS)])
    return BARE_RECORDS / bare_copy(clusters, "bare-source", "bare-target", PARTITIONS,
                                    BARE_RECORDS)


def _fill(args: tuple[str, int]) -> None:
    bootstrap, partition = args
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3})
    for i in range(BARE_RECORDS // PARTITIONS):
        while True:
            try:
                producer.produce("bare-source", value(i), partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


class Follower(threading.Thread):
    """Reads one remote topic from the start; (sequence, latency s) per record seen."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.seen: list[tuple[int, float]] = []
        self.arrived: list[float] = []
        """Each record's arrival (monotonic clock), in `seen`'s order."""
        self.distinct: set[int] = set()
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{topic}",
                                  "isolation.level": "read_committed",
                                  "enable.auto.commit": False, "log_level": 3,
                                  "topic.metadata.refresh.interval.ms": 1000})

    def run(self) -> None:
        assigned = False
        while not self.stop.is_set():
            if not assigned:
                topics = self.consumer.list_topics(timeout=5).topics
                if self.topic not in topics:
                    time.sleep(0.5)
                    continue
                self.consumer.assign([TopicPartition(self.topic, p, 0)
                                      for p in range(len(topics[self.topic].partitions))])
                assigned = True
            for msg in self.consumer.consume(1000, 0.2):
                if msg.error() is None and msg.value() is not None:
                    now = time.time()
                    sequence = int(msg.value())
                    self.seen.append((sequence, now - msg.timestamp()[1] / 1000))
                    self.arrived.append(time.monotonic())
                    self.distinct.add(sequence)
        self.consumer.close()


class Cycles(threading.Thread):
    """Follows `ferry mirror --continuous --json`: each cycle's seconds, and the Connect
    server's memory (RSS of its process tree) after the 10th cycle and after the last."""

    def __init__(self, ferry: subprocess.Popen[str], server_pid: int) -> None:
        super().__init__(daemon=True)
        self.ferry, self.server_pid = ferry, server_pid
        self.seconds: list[float] = []
        self.timings: list[dict[str, float]] = []
        """Each copying cycle's parts (`timings` of its JSON)."""
        self.rss: dict[int, int] = {}
        self.live: dict[int, int | None] = {}

    def _rss(self) -> int:
        import psutil

        root = psutil.Process(self.server_pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])

    def _live_heap(self) -> int | None:
        """The server JVM's heap in use right after a full GC (`jcmd GC.run`): its live
        data, which a leak would grow (RSS also moves with how much heap G1 keeps)."""
        import re
        import shutil

        jcmd = shutil.which("jcmd")
        if jcmd is None:
            return None
        subprocess.run([jcmd, str(self.server_pid), "GC.run"], capture_output=True,
                       check=False)
        info = subprocess.run([jcmd, str(self.server_pid), "GC.heap_info"],
                              capture_output=True, text=True, check=False).stdout
        found = re.search(r"used (\d+)K", info)
        return int(found.group(1)) * 1024 if found else None

    def run(self) -> None:
        import json

        assert self.ferry.stdout is not None
        for line in self.ferry.stdout:
            if line.startswith("{"):
                cycle = json.loads(line)
                self.seconds.append(float(cycle["seconds"]))
                if not cycle.get("idle", True):
                    self.timings.append(cycle.get("timings", {}))
                if len(self.seconds) in (10, 25, 50, 100) or len(self.seconds) % 500 == 0:
                    self.rss[len(self.seconds)] = self._rss()
                if len(self.seconds) in (10, 100):
                    self.live[len(self.seconds)] = self._live_heap()
        self.rss[len(self.seconds)] = self._rss()
        self.live[len(self.seconds)] = self._live_heap()


def _stopped(ferry: subprocess.Popen[str]) -> None:
    """SIGTERM: `ferry mirror --continuous` finishes its running cycle and exits."""
    ferry.send_signal(signal.SIGTERM)
    ferry.wait(300)


def summary(name: str, follower: Follower, sent: int, warm_until: int) -> None:
    sequences = [s for s, _ in follower.seen]
    lost = len(set(range(sent)) - set(sequences))
    doubled = len(sequences) - len(set(sequences))
    late = sorted(lat for s, lat in follower.seen if s >= warm_until)
    if not late:
        print(f"  {name:<34} nothing arrived after the warm-up; lost {lost:,}")
        return
    q = statistics.quantiles(late, n=100, method="inclusive")
    print(f"  {name:<34} p50 {q[49]:5.1f} s  p95 {q[94]:5.1f} s  p99 {q[98]:5.1f} s  "
          f"max {late[-1]:5.1f} s   lost {lost:,}  doubled {doubled:,}")


def delivered(name: str, follower: Follower, sent: int, window: tuple[float, float],
              rate: float) -> None:
    """The rate a mirror delivered while the stream ran, how far behind it was when the
    stream stopped, and when it had everything."""
    began, ended = window
    during = sum(1 for t in follower.arrived if began <= t <= ended)
    behind = sent - sum(1 for t in follower.arrived if t <= ended)
    done = f"{follower.arrived[-1] - ended:.1f} s later" if len(follower.arrived) >= sent \
        and follower.arrived else "never"
    print(f"  {name:<34} offered {rate:,.0f} records/s, delivered {during / (ended - began):,.0f}"
          f" records/s while the stream ran; {max(0, behind):,} behind when it stopped, all "
          f"there {done}")


def where_time_goes(cycles: Cycles) -> None:
    """Where a copying cycle's time went: its parts' medians and 99th percentiles."""
    if not cycles.timings:
        return
    parts = []
    for part in ("start", "copy", "finish"):
        values = sorted(t[part] for t in cycles.timings if part in t)
        if len(values) > 1:
            q = statistics.quantiles(values, n=100, method="inclusive")
            parts.append(f"{part} {statistics.median(values):.2f}/{q[98]:.2f} s")
    print(f"  ferry copying cycles: {len(cycles.timings)}; median/p99 per part: "
          f"{', '.join(parts)} (a record waits for the next plan, up to one cycle, then "
          "for that cycle's copy)")


def dag_runs(airflow: Airflow, dag_id: str) -> None:
    """The DAG runs' count, durations and task processes (tasks that ran, not skipped)."""
    from datetime import datetime

    found = airflow.api("GET", f"/dags/{dag_id}/dagRuns", limit="1000")["dag_runs"]
    done = [r for r in found if r["end_date"] and r["start_date"]]
    if not done:
        print("  airflow: no DAG run finished")
        return
    seconds = sorted((datetime.fromisoformat(r["end_date"])
                      - datetime.fromisoformat(r["start_date"])).total_seconds() for r in done)
    ran = [sum(1 for t in airflow.tasks(dag_id, r["dag_run_id"]).values()
               if t.state not in ("skipped", None)) for r in done]
    print(f"  airflow: {len(done)} DAG runs finished ({sum(r['state'] == 'success' for r in done)}"
          f" succeeded), median {statistics.median(seconds):.1f} s, max {seconds[-1]:.1f} s; "
          f"task processes per run: median {statistics.median(ran):.0f}, max {max(ran)}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--rate", default="200",
                        help="records/s, or bare:F for F times the bare copy loop's rate")
    parser.add_argument("--no-mm2", action="store_true")
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--mode", choices=("cli", "continuous", "schedule"), default="cli")
    parser.add_argument("--spark", choices=("connect", "submit"), default="connect",
                        help="Airflow modes: spark_default the local Spark Connect server "
                             "(default) or spark local[*] (spark-submit)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferry-latency-") as name, \
            local_clusters(Path(name) / "kafka") as clusters:
        tmp = Path(name)
        if args.rate.startswith("bare:"):
            bare = bare_rate(clusters)
            rate = bare * float(args.rate.removeprefix("bare:"))
            print(f"bare copy loop: {bare:,.0f} records/s ({BARE_RECORDS:,} records of "
                  f"{SIZE} bytes, 2 processes, 50k-record transactions)")
        else:
            rate = float(args.rate)
        print(f"latency: {rate:,.0f} records/s over {PARTITIONS} partitions for "
              f"{args.seconds:.0f} s (warm-up {args.warmup:.0f} s left out)")
        create_topic(clusters["source"], TOPIC, PARTITIONS)
        server = spark_server.up(tmp / "spark")
        with contextlib.ExitStack() as stack:
            stack.callback(spark_server.down, tmp / "spark")
            config = write_config(tmp / "mm2.properties", clusters, TOPIC, tmp / "state",
                                  f"ferry.spark.master = {server.url}\n"
                                  + SCHEDULES.get(args.mode, ""))
            cycles = None
            if args.mode == "cli":
                ferry = subprocess.Popen(
                    [str(Path(sys.executable).parent / "ferry"), "mirror", config, "--flow",
                     "source->target", "--continuous", "--json"],
                    stdout=subprocess.PIPE, stderr=open(tmp / "ferry.log", "wb"),  # noqa: SIM115
                    text=True, env={**os.environ})
                cycles = Cycles(ferry, server.pid or 0)
                cycles.start()
                stack.callback(cycles.join, 30)  # its last RSS, before the server stops
                stack.callback(_stopped, ferry)
            else:
                host, port = server.url.removeprefix("sc://").split(":")
                spark_conn: dict[str, object] = (
                    {"conn_type": "spark", "host": "local[*]"} if args.spark == "submit"
                    else {"conn_type": "spark_connect", "host": host, "port": int(port)})
                airflow, _ = stack.enter_context(running(tmp, Path(config), [DAG_ID],
                                                         spark_conn))
                airflow.api("PATCH", f"/dags/{DAG_ID}", {"is_paused": False})
            mirror_maker = None if args.no_mm2 else mm2_dedicated(tmp, clusters, "mm2src",
                                                                    TOPIC)
            mirrors = (("ferry", f"source.{TOPIC}"),) + (
                () if mirror_maker is None else (("mm2", f"mm2src.{TOPIC}"),))
            followers = {n: Follower(clusters["target"], t) for n, t in mirrors}
            for follower in followers.values():
                follower.start()
            stop = threading.Event()
            try:
                began = time.monotonic()
                sent = stream(clusters["source"], rate, args.seconds, stop)
                window = (began, time.monotonic())
                deadline = time.monotonic() + 150  # let both catch up (a scheduled run too)
                while time.monotonic() < deadline and any(
                        len(f.distinct) < sent for f in followers.values()):
                    time.sleep(1)
            finally:
                if mirror_maker is not None:
                    os.killpg(mirror_maker.pid, signal.SIGTERM)
                for follower in followers.values():
                    follower.stop.set()
                    follower.join(10)
                if mirror_maker is not None:
                    mirror_maker.wait(60)
            if args.mode != "cli":
                airflow.api("PATCH", f"/dags/{DAG_ID}", {"is_paused": True})
                dag_runs(airflow, DAG_ID)
        warm_until = int(args.warmup * rate)
        label = LABELS[args.mode] + (", spark local[*]" if args.mode != "cli"
                                     and args.spark == "submit" else "")
        names = {"ferry": label, "mm2": "MirrorMaker 2 (dedicated)"}
        for name, follower in followers.items():
            summary(names[name], follower, sent, warm_until)
        for name, follower in followers.items():
            delivered(names[name], follower, sent, window, rate)
        if cycles is not None:
            where_time_goes(cycles)
        seconds = sorted(cycles.seconds) if cycles else []
        if seconds:
            print(f"  ferry cycles: {len(seconds)}, median {statistics.median(seconds):.1f} s, "
                  f"max {seconds[-1]:.1f} s")
        if cycles and 10 in cycles.rss and len(cycles.rss) > 1:
            base = cycles.rss[10]
            points = ", ".join(f"{n}: {rss / 2**20:,.0f} MiB ({rss / base - 1:+.0%})"
                               for n, rss in sorted(cycles.rss.items()) if n > 10)
            print(f"  Connect server RSS (its process tree) after 10 cycles "
                  f"{base / 2**20:,.0f} MiB; after {points}")
            live = ", ".join(f"after {n} cycles {heap / 2**20:,.0f} MiB"
                             for n, heap in sorted(cycles.live.items()) if heap)
            if live:
                print(f"  Connect server JVM heap in use after a full GC: {live}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

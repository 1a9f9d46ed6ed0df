"""End-to-end latency of a steady stream: Ferry on a warm Spark, and MirrorMaker 2
(dedicated mode, from the Kafka jars Ferry fetches) in the same run.

    .venv/bin/python bench/latency.py [--mode cli|continuous|schedule] [--seconds 180]
                                      [--rate 200] [--warmup 60]

A producer writes `--rate` records/s (each value its sequence number) over 4 partitions
for `--seconds`. Ferry mirrors them as flow `source->target` through a local Spark Connect
server, MM2 as `mm2src->target`, into the same target cluster. `--mode` says how Ferry runs:

- `cli`: `ferry mirror --continuous`, one process;
- `continuous`: the flow's DAG with `ferry.schedule = @continuous` under a real Airflow
  scheduler (api-server, scheduler with the LocalExecutor, dag-processor, as `airflow
  standalone` runs them; `ferry.continuous.run.seconds = 300`, so runs end and start again
  during the measurement), its `spark_default` connection of type `spark_connect`;
- `schedule`: the same Airflow, the DAG every minute (`ferry.schedule = * * * * *`).

A reader follows both remote topics (read_committed) and takes each record's latency as its
arrival time minus its CreateTime (both mirrors keep it). Records produced during
`--warmup` are left out of the percentiles; all are counted for lost and doubled. Under
Airflow, the DAG runs' durations and task processes are printed too.
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


def stream(bootstrap: str, rate: int, seconds: float, stop: threading.Event) -> int:
    """Write `rate` records/s for `seconds`; returns how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    started, sent = time.monotonic(), 0
    while not stop.is_set() and time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            producer.produce(TOPIC, str(sent).encode(), partition=sent % PARTITIONS)
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)
    return sent


class Follower(threading.Thread):
    """Reads one remote topic from the start; (sequence, latency s) per record seen."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.seen: list[tuple[int, float]] = []
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
                    self.seen.append((int(msg.value()), now - msg.timestamp()[1] / 1000))
        self.consumer.close()


class Cycles(threading.Thread):
    """Follows `ferry mirror --continuous --json`: each cycle's seconds, and the Connect
    server's memory (RSS of its process tree) after the 10th cycle and after the last."""

    def __init__(self, ferry: subprocess.Popen[str], server_pid: int) -> None:
        super().__init__(daemon=True)
        self.ferry, self.server_pid = ferry, server_pid
        self.seconds: list[float] = []
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
                self.seconds.append(float(json.loads(line)["seconds"]))
                if len(self.seconds) == 10 or len(self.seconds) % 25 == 0:
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
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--mode", choices=("cli", "continuous", "schedule"), default="cli")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferry-latency-") as name, \
            local_clusters(Path(name) / "kafka") as clusters:
        tmp = Path(name)
        print(f"latency: {args.rate} records/s over {PARTITIONS} partitions for "
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
                airflow, _ = stack.enter_context(running(
                    tmp, Path(config), [DAG_ID],
                    {"conn_type": "spark_connect", "host": host, "port": int(port)}))
                airflow.api("PATCH", f"/dags/{DAG_ID}", {"is_paused": False})
            mirror_maker = mm2_dedicated(tmp, clusters, "mm2src", TOPIC)
            followers = {n: Follower(clusters["target"], t)
                         for n, t in (("ferry", f"source.{TOPIC}"), ("mm2", f"mm2src.{TOPIC}"))}
            for follower in followers.values():
                follower.start()
            stop = threading.Event()
            try:
                sent = stream(clusters["source"], args.rate, args.seconds, stop)
                deadline = time.monotonic() + 150  # let both catch up (a scheduled run too)
                while time.monotonic() < deadline and any(
                        len({s for s, _ in f.seen}) < sent for f in followers.values()):
                    time.sleep(1)
            finally:
                os.killpg(mirror_maker.pid, signal.SIGTERM)
                for follower in followers.values():
                    follower.stop.set()
                    follower.join(10)
                mirror_maker.wait(60)
            if args.mode != "cli":
                airflow.api("PATCH", f"/dags/{DAG_ID}", {"is_paused": True})
                dag_runs(airflow, DAG_ID)
        warm_until = int(args.warmup * args.rate)
        summary(LABELS[args.mode], followers["ferry"], sent, warm_until)
        summary("MirrorMaker 2 (dedicated)", followers["mm2"], sent, warm_until)
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

"""Partition-scale benchmark: one flow over many partitions (by default 50 topics × 200, ten
thousand), a record in each, on a warm local Spark Connect server.

    .venv/bin/python bench/scale.py [--topics 50] [--partitions 200] [--per-partition 1]
                                    [--cycles 100] [--touched 100] [--set KEY=VALUE ...]

1. The first cycle (`ferry mirror`, a process of its own: remote topics created, every
   partition copied). Target: under 60 s.
2. `ferry mirror --continuous` for `--cycles` cycles: idle cycles, and every few cycles one
   new record in each of `--touched` partitions spread over the topics. Printed: the idle
   cycles' and the touched cycles' durations (targets: under 1 s and under 3 s), every
   record on the target, and the memory (RSS) of the loop's process and of the Connect
   server's process tree after 10 cycles and at the end (flat: within a few per cent).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from confluent_kafka import Producer

from bench.common import create_topic, ferry_mirror, local_clusters, write_config
from ferry.local import spark_server
from ferry.state.reader import rows


def wait_for_leaders(bootstrap: str, topics: list[str], partitions: int) -> None:
    """Until every partition of `topics` has a leader (a broker brings thousands of new
    partitions online over seconds; a record sent to one not yet there is refused)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = admin.list_topics(timeout=30).topics
        if all(t in found and len(found[t].partitions) == partitions
               and all(p.leader >= 0 for p in found[t].partitions.values()) for t in topics):
            return
        time.sleep(1)
    raise SystemExit("the source's partitions got no leaders within 300 s")


def rss(pid: int) -> int:
    """RSS of a process and its children."""
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])


class Loop(threading.Thread):
    """Follows `ferry mirror --continuous --json`: each cycle, and the memory of the loop
    and of the server after cycles 10, 25, 50 and 75 and every hundredth."""

    def __init__(self, ferry: subprocess.Popen[str], server: int) -> None:
        super().__init__(daemon=True)
        self.ferry, self.server = ferry, server
        self.cycles: list[dict[str, object]] = []
        self.memory: dict[int, tuple[int, int]] = {}
        self.changed = threading.Condition()

    def run(self) -> None:
        assert self.ferry.stdout is not None
        for line in self.ferry.stdout:
            if not line.startswith("{"):
                continue
            with self.changed:
                self.cycles.append(json.loads(line))
                if len(self.cycles) in (10, 25, 50, 75) or len(self.cycles) % 100 == 0:
                    self.memory[len(self.cycles)] = (rss(self.ferry.pid), rss(self.server))
                self.changed.notify_all()

    def wait_for(self, count: int, timeout: float = 300) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.cycles) >= count, timeout):
                raise SystemExit(f"no cycle {count} within {timeout:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--per-partition", type=int, default=1)
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--touched", type=int, default=100)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a line for the flow's config, e.g. "
                             "ferry.state.record.interval.seconds=600")
    args = parser.parse_args()
    total = args.topics * args.partitions
    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as name, \
            local_clusters(Path(name) / "kafka") as clusters:
        tmp = Path(name)
        producer = Producer({"bootstrap.servers": clusters["source"], "linger.ms": 20,
                             "log_level": 3})
        for t in range(args.topics):
            create_topic(clusters["source"], f"scale-{t}", args.partitions)
        wait_for_leaders(clusters["source"], [f"scale-{t}" for t in range(args.topics)],
                         args.partitions)
        delivered: list[int] = []

        def count(err: object, _msg: object) -> None:
            delivered.append(err is None)

        for t in range(args.topics):
            for p in range(args.partitions):
                for _ in range(args.per_partition):
                    producer.produce(f"scale-{t}", b"x" * 200, partition=p, on_delivery=count)
            producer.poll(0)
        producer.flush(60)
        server = spark_server.up(tmp / "spark")
        try:
            extra = "".join(f"{line.replace('=', ' = ', 1)}\n" for line in args.set)
            config = write_config(tmp / "mm2.properties", clusters, "scale-.*", tmp / "state",
                                  f"ferry.spark.master = {server.url}\n{extra}")
            print(f"scale: {args.topics} topics, {total:,} partitions, "
                  f"{total * args.per_partition:,} records, warm Spark"
                  f"{''.join(' ' + x for x in args.set)}")
            seconds, first = ferry_mirror(config)
            print(f"  first cycle (remote topics created; a process of its own)  "
                  f"{seconds:.1f} s  (target < 60 s); {first['offsets']:,} offsets")
            running = subprocess.Popen(
                [str(Path(sys.executable).parent / "ferry"), "mirror", config, "--flow",
                 "source->target", "--continuous", "--json"],
                stdout=subprocess.PIPE, stderr=(tmp / "loop.log").open("wb"), text=True)
            loop = Loop(running, server.pid or 0)
            loop.start()
            touched_runs: set[str] = set()
            pick = random.Random(7)
            spots = [(f"scale-{t}", p) for t in range(args.topics)
                     for p in range(args.partitions)]
            try:
                while len(loop.cycles) < args.cycles:
                    loop.wait_for(len(loop.cycles) + 3)  # a few idle cycles between
                    for topic, partition in pick.sample(spots, args.touched):
                        producer.produce(topic, b"y" * 200, partition=partition,
                                         on_delivery=count)
                    producer.flush(30)
                    before = len(loop.cycles)
                    deadline = time.monotonic() + 120
                    while time.monotonic() < deadline:
                        loop.wait_for(len(loop.cycles) + 1)
                        copied = [c for c in loop.cycles[before:] if not c["idle"]]
                        if sum(int(str(c["offsets"])) for c in copied) >= args.touched:
                            touched_runs.update(str(c["run_id"]) for c in copied)
                            break
            finally:
                running.send_signal(signal.SIGTERM)
                running.wait(300)
                loop.join(30)
            # what the runs recorded (the loop writes its last Delta batch as it stops):
            # the remote topics' end offsets also count each transaction's commit markers
            mirrored = sum(r["records"] for r in rows(str(tmp / "state" / "runs"),
                                                      "source->target"))
            idle = sorted(float(str(c["seconds"])) for c in loop.cycles if c["idle"])
            touched = sorted(float(str(c["seconds"])) for c in loop.cycles
                             if c["run_id"] in touched_runs)
            failed = [c for c in loop.cycles if not c["idle"] and c["job_exit_code"] != 0]

            def spread(values: list[float]) -> str:
                if len(values) < 2:
                    return f"{values}"
                q = statistics.quantiles(values, n=100, method="inclusive")
                return (f"median {statistics.median(values):.2f} s, p95 {q[94]:.2f} s, max "
                        f"{values[-1]:.2f} s")

            print(f"  continuous: {len(loop.cycles)} cycles, {len(failed)} failed; idle cycles "
                  f"({len(idle)}): {spread(idle)} (target < 1 s)")
            print(f"  cycles copying 1 record in each of {args.touched} partitions "
                  f"({len(touched)}): {spread(touched)} (target < 3 s)")
            producer.flush(60)
            written = sum(delivered)  # every record the source acknowledged
            print(f"  copied (the runs table): {mirrored:,} of {written:,} records")
            base = loop.memory.get(10)
            if base:
                points = ", ".join(
                    f"after {n}: loop {a / 2**20:,.0f} MiB ({a / base[0] - 1:+.0%}), server "
                    f"{b / 2**20:,.0f} MiB ({b / base[1] - 1:+.0%})"
                    for n, (a, b) in sorted(loop.memory.items()) if n > 10)
                print(f"  memory after 10 cycles: loop {base[0] / 2**20:,.0f} MiB, server "
                      f"{base[1] / 2**20:,.0f} MiB; {points}")
        finally:
            spark_server.down(tmp / "spark")
    return 0


if __name__ == "__main__":
    sys.exit(main())

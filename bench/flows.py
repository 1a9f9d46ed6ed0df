"""Many flows on one warm server: `--flows` flows (20), each `ferry.schedule = @continuous`
under one real Airflow scheduler (api-server, scheduler with the LocalExecutor,
dag-processor), all copying through one local Spark Connect server.

    .venv/bin/python bench/flows.py [--flows 20] [--rate 50] [--seconds 600] [--warmup 120]
                                    [--catchup 600]

Each flow mirrors a topic of its own (2 partitions) from the source cluster, under an alias
of its own (`s0->target`, `s1->target`, ...), while a producer writes `--rate` records/s to
each topic. A reader follows every remote topic (read_committed); a record's latency is
its arrival time minus its CreateTime. After the stream, the flows get up to `--catchup`
seconds to deliver everything (a flow still short is named). Printed: each flow's p50/p99,
lost and doubled
(target: p99 at most 5 s for every flow), and the Connect server's memory (RSS of its
process tree) over the run (target: flat).
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
from confluent_kafka import Producer

from bench.common import create_topic, local_clusters
from bench.latency import Follower
from ferry.local import spark_server
from tests.scheduler.stack import running

PARTITIONS = 2


def config_text(clusters: dict[str, str], flows: int, state: Path, url: str,
                extra: list[str]) -> str:
    aliases = [f"s{i}" for i in range(flows)]
    lines = [f"clusters = {', '.join(aliases)}, target",
             f"target.bootstrap.servers = {clusters['target']}", "replication.factor = 1",
             "checkpoints.topic.replication.factor = 1",
             "heartbeats.topic.replication.factor = 1",
             f"ferry.state.dir = {state}", f"ferry.spark.master = {url}",
             "ferry.schedule = @continuous", "ferry.continuous.run.seconds = 300", *extra]
    for i, alias in enumerate(aliases):
        lines += [f"{alias}.bootstrap.servers = {clusters['source']}",
                  f"{alias}->target.enabled = true", f"{alias}->target.topics = t{i}"]
    return "\n".join(lines) + "\n"


def stream(bootstrap: str, flows: int, rate: float, seconds: float) -> int:
    """`rate` records/s to each flow's topic for `seconds`; the count written to each."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    started, sent = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            for i in range(flows):
                producer.produce(f"t{i}", str(sent).encode(), partition=sent % PARTITIONS)
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)
    return sent


class Memory(threading.Thread):
    """The Connect server's RSS (its process tree) every 30 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.points = pid, []  # type: ignore[var-annotated]
        self.stop = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(30):
            root = psutil.Process(self.pid)
            rss = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            self.points.append((time.monotonic() - started, rss))


class Cpu(threading.Thread):
    """CPU seconds by kind of process, sampled every 2 s while the stream runs: the
    Connect server's tree, the flows' task processes (each an @continuous DAG's loop) and
    their supervisors, the rest of Airflow, the brokers, and this bench (producer and
    readers)."""

    def __init__(self, server: int) -> None:
        super().__init__(daemon=True)
        self.server, self.stop = server, threading.Event()
        self.seconds: dict[str, float] = {}
        self._last: dict[int, float] = {}
        self.wall = 0.0

    def kind(self, process: psutil.Process, tree: set[int]) -> str:
        if process.pid in tree:
            return "Connect server"
        if process.pid == psutil.Process().pid:
            return "bench"
        line = " ".join(process.cmdline())
        if "kafka.Kafka" in line:
            return "brokers"
        if line.startswith("airflow worker --"):  # a task: here, a flow's loop
            return "flow loops"
        if line.startswith("airflow supervisor"):
            return "task supervisors"
        if "airflow" in line:
            return "airflow"
        return "other"

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(2):
            root = psutil.Process(self.server)
            tree = {root.pid, *(c.pid for c in root.children(recursive=True))}
            for process in psutil.process_iter():
                try:
                    times = process.cpu_times()
                    total = times.user + times.system
                    kind = self.kind(process, tree)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                before = self._last.get(process.pid)
                self._last[process.pid] = total
                if before is not None:
                    self.seconds[kind] = self.seconds.get(kind, 0.0) + max(0.0, total - before)
            self.wall = time.monotonic() - started


CYCLE_LINE = re.compile(r"^cycle \S+: .* in (?P<seconds>[0-9.]+)s"
                        r"(?: \(start (?P<start>[0-9.]+)s, copy (?P<copy>[0-9.]+)s)?")


BATCH_LINE = re.compile(r"^recorded behind the copy: .* in (?P<seconds>[0-9.]+)s"
                        r"(?: \((?P<parts>.*)\))?")


def runs_of(airflow: Any, dags: list[str]) -> None:
    """Each flow's DAG runs: how many, how they ended, and how their runs overlapped (the run
    before copies on until the next one names itself the flow's newest)."""
    from datetime import datetime

    overlaps: list[float] = []
    states: dict[str, int] = {}
    for dag in dags:
        runs = sorted(airflow.api("GET", f"/dags/{dag}/dagRuns", limit="100")["dag_runs"],
                      key=lambda r: r["start_date"] or "")
        for run in runs:
            states[run["state"]] = states.get(run["state"], 0) + 1
        for before, after in itertools.pairwise(runs):
            if before["end_date"] and after["start_date"]:
                overlaps.append(datetime.fromisoformat(before["end_date"]).timestamp()
                                - datetime.fromisoformat(after["start_date"]).timestamp())
    print("  DAG runs: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
          + (f"; a run ended a median of {statistics.median(overlaps):.1f} s (min "
             f"{min(overlaps):.1f}, max {max(overlaps):.1f}) after the next one started"
             if overlaps else ""))


def turns(airflow: Any, dags: list[str]) -> None:
    """Where a run's turn goes, over every flow, part by part: from the old run's last cycle
    to its task's end (the loop's close: kept writers, the last Delta batch, the session),
    to its run's end, to the next run's start (Airflow's continuous schedule), to its task's
    start (queued, then a task process), to its first cycle's start (imports, config,
    session), and that first cycle (every step due). The flow copies nothing from the old
    run's last cycle to the new run's first."""
    from datetime import datetime

    def at(text: str | None) -> datetime | None:
        return datetime.fromisoformat(text) if text else None

    batches: list[tuple[float, dict[str, float]]] = []

    def cycles(dag: str, run: dict[str, Any], task: dict[str, Any]
               ) -> list[tuple[float, float, float, float]]:
        """(end, seconds, sync-and-plan seconds, copy seconds) of each cycle the task's log
        names, ends in epoch seconds."""
        found = []
        for entry in airflow.task_log_entries(dag, run["dag_run_id"], task["task_id"],
                                              max(1, task["try_number"])):
            if isinstance(entry, dict) and (m := BATCH_LINE.match(str(entry.get("event")))):
                batches.append((float(m["seconds"]), {
                    part.strip(): float(taken) for part, taken in
                    re.findall(r"([a-z ]+) ([0-9.]+)s", m["parts"] or "")}))
            if isinstance(entry, dict) and (m := CYCLE_LINE.match(str(entry.get("event")))):
                found.append((datetime.fromisoformat(entry["timestamp"]).timestamp(),
                              float(m["seconds"]), float(m["start"] or 0),
                              float(m["copy"] or 0)))
        return found

    parts: dict[str, list[float]] = {name: [] for name in (
        "last cycle -> task end", "task end -> run end", "run end -> next run start",
        "-> its task start", "-> first cycle start", "first cycle's sync and plan",
        "its copy", "copying nothing")}
    slowest: tuple[float, str, Any, Any] = (0.0, "", None, None)
    slowest_start: tuple[float, str, Any, Any] = (0.0, "", None, None)
    for dag in dags:
        runs = sorted(airflow.api("GET", f"/dags/{dag}/dagRuns", limit="100")["dag_runs"],
                      key=lambda r: r["start_date"] or "")
        tasks, logged = {}, {}  # each run's task, and its cycles (its log read once)
        for run in runs:
            found = airflow.api("GET", f"/dags/{dag}/dagRuns/{run['dag_run_id']}"
                                       "/taskInstances")["task_instances"]
            tasks[run["dag_run_id"]] = found[0] if found else None
            logged[run["dag_run_id"]] = cycles(dag, run, found[0]) if found else []
        for before, after in itertools.pairwise(runs):
            old, new = tasks[before["dag_run_id"]], tasks[after["dag_run_id"]]
            times = [at(before["end_date"]), at(after["start_date"]),
                     at(old and old["end_date"]), at(new and new["start_date"])]
            if old is None or new is None or any(t is None for t in times):
                continue
            run_end, run_start, task_end, task_start = (t.timestamp() for t in times if t)
            old_cycles, new_cycles = logged[before["dag_run_id"]], logged[after["dag_run_id"]]
            if not old_cycles or not new_cycles:
                continue
            last_end = old_cycles[-1][0]
            if task_end - last_end > slowest[0]:
                slowest = (task_end - last_end, dag, before, old)
            first_end, first_seconds, first_plan, first_copy = new_cycles[0]
            first_start = first_end - first_seconds
            if first_start + first_plan + first_copy - task_start > slowest_start[0]:
                slowest_start = (first_start + first_plan + first_copy - task_start, dag,
                                 after, new)
            for name, seconds in zip(parts, (
                    task_end - last_end, run_end - task_end, run_start - run_end,
                    task_start - run_start, first_start - task_start, first_plan,
                    first_copy, first_start + first_plan + first_copy - last_end),
                    strict=True):
                parts[name].append(seconds)
    if not parts["copying nothing"]:
        print("  turns: no DAG run was followed by another with cycles in both")
        return
    print(f"  turns ({len(parts['copying nothing'])}), median / max s: " + ", ".join(
        f"{name} {statistics.median(values):.1f} / {max(values):.1f}"
        for name, values in parts.items()))
    if batches:
        names = sorted({part for _, parts_ in batches for part in parts_})
        print(f"  Delta batches behind the copies ({len(batches)}): median "
              f"{statistics.median(s for s, _ in batches):.1f} s, max "
              f"{max(s for s, _ in batches):.1f} s; median per part: " + ", ".join(
                  f"{name} {statistics.median(p.get(name, 0.0) for _, p in batches):.2f} s"
                  for name in names))
    def entries_of(dag: str, run: dict[str, Any], task: dict[str, Any]) -> list[Any]:
        return [e for e in airflow.task_log_entries(dag, run["dag_run_id"], task["task_id"],
                                                    max(1, task["try_number"]))
                if isinstance(e, dict) and "timestamp" in e]

    def show(entries: list[Any], began: float) -> None:
        for entry in entries:
            at_s = datetime.fromisoformat(entry["timestamp"]).timestamp() - began
            print(f"    +{at_s:6.1f} s {entry.get('logger', '')}: {str(entry['event'])[:160]}")

    seconds, dag, run, task = slowest
    if task is not None:  # what the slowest end of a run did after its last cycle
        entries = entries_of(dag, run, task)
        last = max(i for i, e in enumerate(entries) if CYCLE_LINE.match(str(e.get("event"))))
        print(f"  the slowest end of a run ({dag}, {seconds:.1f} s after its last cycle):")
        show(entries[last:][:25], datetime.fromisoformat(entries[last]["timestamp"]).timestamp())
    seconds, dag, run, task = slowest_start
    if task is not None:  # what the slowest start did up to its first cycle's copy
        entries = entries_of(dag, run, task)
        first = min(i for i, e in enumerate(entries) if CYCLE_LINE.match(str(e.get("event"))))
        print(f"  the slowest start of a run ({dag}, its first copy done {seconds:.1f} s "
              "after its task started):")
        show(entries[:first + 1][-40:], datetime.fromisoformat(task["start_date"]).timestamp())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flows", type=int, default=20)
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--warmup", type=float, default=120)
    parser.add_argument("--catchup", type=float, default=600,
                        help="seconds the flows get to catch up after the stream")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a line for every flow's config, e.g. "
                             "ferry.state.record.interval.seconds=60")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferry-flows-") as name, \
            local_clusters(Path(name) / "kafka") as clusters:
        tmp = Path(name)
        for i in range(args.flows):
            create_topic(clusters["source"], f"t{i}", PARTITIONS)
        server = spark_server.up(tmp / "spark")
        try:
            config = tmp / "mm2.properties"
            config.write_text(config_text(clusters, args.flows, tmp / "state", server.url,
                                          args.set))
            dags = [f"ferry_s{i}_to_target" for i in range(args.flows)]
            host, port = server.url.removeprefix("sc://").split(":")
            env = {"AIRFLOW__CORE__PARALLELISM": str(args.flows + 4),
                   "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2"}
            with running(tmp, config, dags, {"conn_type": "spark_connect", "host": host,
                                             "port": int(port)}, extra_env=env) as (airflow, _):
                for dag in dags:
                    airflow.api("PATCH", f"/dags/{dag}", {"is_paused": False})
                followers = [Follower(clusters["target"], f"s{i}.t{i}")
                             for i in range(args.flows)]
                for follower in followers:
                    follower.start()
                memory, cpu = Memory(server.pid or 0), Cpu(server.pid or 0)
                memory.start()
                cpu.start()
                print(f"flows: {args.flows} flows @continuous on one warm server, "
                      f"{args.rate:.0f} records/s each for {args.seconds:.0f} s (warm-up "
                      f"{args.warmup:.0f} s left out){''.join(' ' + x for x in args.set)}")
                sent = stream(clusters["source"], args.flows, args.rate, args.seconds)
                cpu.stop.set()
                # every flow catches up (lag far beyond a cycle is the point of the
                # bench): up to --catchup seconds, then the stragglers are named
                stopped = time.monotonic()
                while time.monotonic() - stopped < args.catchup and any(
                        len(f.distinct) < sent for f in followers):
                    time.sleep(1)
                late = [i for i, f in enumerate(followers) if len(f.distinct) < sent]
                print(f"  all records on the target {time.monotonic() - stopped:.0f} s after "
                      f"the stream stopped" if not late else
                      f"  after {args.catchup:.0f} s, flows still short: "
                      + ", ".join(f"s{i} ({sent - len(followers[i].distinct):,})"
                                  for i in late))
                memory.stop.set()
                for follower in followers:
                    follower.stop.set()
                    follower.join(10)
                for dag in dags:
                    airflow.api("PATCH", f"/dags/{dag}", {"is_paused": True})
                runs_of(airflow, dags)
                turns(airflow, dags)
        finally:
            spark_server.down(tmp / "spark")
    warm_until = int(args.warmup * args.rate)
    worst = 0.0
    for i, follower in enumerate(followers):
        sequences = [s for s, _ in follower.seen]
        missing = sorted(set(range(sent)) - set(sequences))
        lost = len(missing)
        doubled = len(sequences) - len(set(sequences))
        late = sorted(lat for s, lat in follower.seen if s >= warm_until)
        if len(late) < 2:
            print(f"  s{i}->target: nothing arrived after the warm-up; lost {lost:,}")
            worst = float("inf")
            continue
        q = statistics.quantiles(late, n=100, method="inclusive")
        worst = max(worst, q[98])
        print(f"  s{i}->target  p50 {q[49]:5.1f} s  p99 {q[98]:5.1f} s  max {late[-1]:5.1f} s"
              f"   lost {lost:,}  doubled {doubled:,}"
              + (f" (sequences {missing[0]:,}..{missing[-1]:,} of {sent:,})" if missing else ""))
    print(f"  worst p99 {worst:.1f} s (target <= 5 s)")
    cpu.join(5)
    if cpu.wall:
        print(f"  CPU while the stream ran ({psutil.cpu_count()} cores x {cpu.wall:.0f} s): "
              + ", ".join(f"{kind} {seconds / cpu.wall:.2f} cores" for kind, seconds
                          in sorted(cpu.seconds.items(), key=lambda kv: -kv[1])))
    if memory.points:
        base = memory.points[0][1]
        print("  Connect server RSS: " + ", ".join(
            f"{t:.0f} s {rss / 2**20:,.0f} MiB ({rss / base - 1:+.0%})"
            for t, rss in memory.points[:: max(1, len(memory.points) // 8)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

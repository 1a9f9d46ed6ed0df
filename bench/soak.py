"""A long soak: a continuous stream mirrored by `ferry mirror --continuous` for hours while
one broker after another is restarted, watching that nothing is lost or doubled and that the
loop's memory stays flat.

    .venv/bin/python bench/soak.py [--rate 1000] [--duration 7200] [--bounce-every 600]
                                   [--baseline 600] [--mm2] [--dir DIR]

The clusters, stream, mirrors and checks are bench/bounce.py's: two local clusters of three
KRaft nodes each (replication factor 3, min ISR 2, a silent node fenced after 3 s), a local
Spark Connect server, a producer thread writing numbered records (idempotent, acks=all)
round-robin over the 3 partitions of `stream` at `--rate` records/s, and `ferry mirror
--continuous` on the warm server mirroring them as flow `source->target` (remote topic
`source.stream`) under a minimal service manager that starts it again at once if it exits
(counted: the continuous run is meant never to need it). With `--mm2`, MirrorMaker 2
(dedicated mode) mirrors the same stream side by side, as `mm2src->target`.

For `--duration` seconds from Ferry's start, every `--bounce-every` seconds one broker is
restarted, waiting each time until every partition is fully replicated again: target and
source nodes alternate, each node in turn, hard (SIGKILL) and clean (SIGTERM) alternating,
so 12 bounces go through every node of both clusters both ways. Every 30 s the resident
memory (RSS) of the `ferry mirror` process (with its Python children, if any: not the
Spark server) is written to `rss.csv` in the work directory, beside the Spark Connect
server's (its JVM and Python workers, for information), the records produced and on the
target, and how far behind the target is; every minute a progress line is printed.

Then the stream stops, Ferry catches up (a cycle started after the stream stopped finds
nothing to copy; at most 5 minutes; MM2: every record arrived and nothing more for 10 s)
and stops, and each remote topic is read back (read_committed) and compared with the
source as bench/bounce.py does: records lost, doubled, in order. Printed: those, restarts,
failed cycles, how far behind the target was at worst (a record's first arrival minus its
CreateTime), and the loop's RSS at `--baseline` seconds (10 minutes: imports, the first
cycles and Spark session are behind it), its maximum after that and at the end, with the
growth over the baseline. Target: 0 lost, 0 doubled, in order, 0 restarts, RSS growth at
most 10 %.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from bench.bounce import (
    CATCH_UP_TIMEOUT_S,
    FERRY_REMOTE,
    MM2_REMOTE,
    PARTITIONS,
    QUIET_S,
    REPLICAS,
    START_TIMEOUT_S,
    TOPIC,
    Follower,
    Stream,
    Supervised,
    Tally,
    bounce,
    compare,
    failed,
    log_counts,
    mirrored_stream,
    read_partition,
    wait_until,
    worst_behind,
)
from bench.common import work_dir
from ferry.local import cluster

SAMPLE_S = 30.0
"""How often the memory and the lag are sampled (a row of `rss.csv`)."""
PROGRESS_S = 60.0
"""How often a progress line is printed."""
RSS_GROWTH_LIMIT = 0.10
"""The loop's RSS may grow this much over its value at the baseline."""
MIB = 1 << 20


class CycleLog:
    """Ferry's cycle reports (`cycles.jsonl`), read on as they are appended and summed up
    rather than kept: a 2-hour run writes thousands of them. Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = self.failed = 0
        self.idle_from: int | None = None
        """While set: the number of cycles before which an idle one does not count."""
        self.idle_seen = False
        self.longest = 0.0
        self.longest_recent = 0.0
        """The longest cycle since `take_recent` was last called."""
        self._offset = 0
        self._lock = threading.Lock()

    def update(self) -> None:
        with self._lock:
            if not self.path.exists():
                return
            with open(self.path, "rb") as log:
                log.seek(self._offset)
                chunk = log.read()
            complete = chunk[:chunk.rfind(b"\n") + 1]
            self._offset += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                if line.startswith("{"):
                    self._add(json.loads(line))

    def _add(self, report: dict[str, object]) -> None:
        self.count += 1
        self.failed += failed(report)
        seconds = report.get("seconds")
        if isinstance(seconds, int | float):
            self.longest = max(self.longest, float(seconds))
            self.longest_recent = max(self.longest_recent, float(seconds))
        if report.get("idle") and self.idle_from is not None and self.count > self.idle_from:
            self.idle_seen = True

    def take_recent(self) -> float:
        with self._lock:
            recent, self.longest_recent = self.longest_recent, 0.0
            return recent

    def watch_idle(self) -> None:
        """From now on, note an idle cycle that starts after the one running now (as
        bench/bounce.py: the cycle after the next report, since one may be under way)."""
        self.update()
        with self._lock:
            self.idle_from, self.idle_seen = self.count + 1, False


def tree_rss(pid: int, python_only: bool) -> tuple[int, int]:
    """(RSS in bytes, process count) of `pid` and its descendants; `python_only`: only the
    descendants that are Python (a mirror's workers, not a JVM it might start)."""
    root = psutil.Process(pid)
    processes = [root]
    for child in root.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if not python_only or "python" in child.name().lower():
                processes.append(child)
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
    return total, len(processes)


def lag_now(follower: Follower) -> float | None:
    """How far behind the source the target is now: the seconds since the newest record
    on the target was produced (None before the first)."""
    for _ in range(3):  # the follower's thread may add one while we look
        try:
            _number, behind = next(reversed(follower.behind.items()))
        except StopIteration:
            return None
        except RuntimeError:
            continue
        return behind + time.monotonic() - follower.last_arrival
    return None


@dataclass
class Sample:
    elapsed: float
    produced: int
    on_target: int
    lag: float | None
    ferry_pid: int
    ferry_rss: int | None
    ferry_processes: int
    spark_rss: int | None
    cycles: int
    failed_cycles: int
    restarts: int


class Monitor(threading.Thread):
    """Every `SAMPLE_S` from Ferry's start: a `Sample`, kept and written to `rss.csv`;
    every `PROGRESS_S`: a progress line. Runs until `stop`."""

    def __init__(self, csv_path: Path, ferry: Supervised, server_pid: int | None,
                 stream: Stream, follower: Follower, log: CycleLog) -> None:
        super().__init__(daemon=True)
        self.csv_path, self.ferry, self.server_pid = csv_path, ferry, server_pid
        self.stream, self.follower, self.log = stream, follower, log
        self.samples: list[Sample] = []
        self.stop = threading.Event()

    def sample(self) -> Sample:
        self.log.update()
        process = self.ferry.process
        try:
            ferry_rss, processes = tree_rss(process.pid, python_only=True)
        except psutil.Error:  # between an exit and its restart
            ferry_rss, processes = None, 0
        spark_rss = None
        if self.server_pid is not None:
            with contextlib.suppress(psutil.Error):
                spark_rss = tree_rss(self.server_pid, python_only=False)[0]
        return Sample(time.monotonic() - self.ferry.began, self.stream.started,
                      len(self.follower.behind), lag_now(self.follower), process.pid,
                      ferry_rss, processes, spark_rss, self.log.count, self.log.failed,
                      self.ferry.restarts)

    def run(self) -> None:
        with open(self.csv_path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["elapsed_s", "produced", "on_target", "lag_s", "ferry_pid",
                             "ferry_rss_mib", "ferry_processes", "spark_rss_mib", "cycles",
                             "failed_cycles", "restarts"])
            next_progress = PROGRESS_S
            while not self.stop.wait(SAMPLE_S - (time.monotonic() - self.ferry.began)
                                     % SAMPLE_S):
                s = self.sample()
                self.samples.append(s)
                writer.writerow([f"{s.elapsed:.0f}", s.produced, s.on_target, _num(s.lag),
                                 s.ferry_pid, _mib(s.ferry_rss), s.ferry_processes,
                                 _mib(s.spark_rss), s.cycles, s.failed_cycles, s.restarts])
                out.flush()
                if s.elapsed + 1 >= next_progress:
                    next_progress += PROGRESS_S
                    print(f"  {_clock(s.elapsed)}  produced {s.produced:,}, on the target "
                          f"{s.on_target:,}, behind {_num(s.lag)} s   Ferry RSS "
                          f"{_mib(s.ferry_rss)} MiB, Spark server {_mib(s.spark_rss)} MiB   "
                          f"cycles {s.cycles:,} (longest last minute "
                          f"{self.log.take_recent():.1f} s, failed {s.failed_cycles}), "
                          f"restarts {s.restarts}", flush=True)


def _mib(size: int | None) -> str:
    return "-" if size is None else f"{size / MIB:.1f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 3600}:{int(seconds) // 60 % 60:02d}:{int(seconds) % 60:02d}"


@dataclass(frozen=True)
class Memory:
    """The loop's RSS over the run, from the samples of one process (restarts aside)."""

    baseline: int | None
    peak_after: int | None
    end: int | None

    @staticmethod
    def of(samples: list[Sample], baseline_s: float) -> Memory:
        first = next((s for s in samples if s.ferry_rss is not None), None)
        same = [s for s in samples if first is not None and s.ferry_pid == first.ferry_pid
                and s.ferry_rss is not None]
        later = [s for s in same if s.elapsed >= baseline_s - 1]
        if not later:
            return Memory(None, None, same[-1].ferry_rss if same else None)
        rss = [s.ferry_rss for s in later if s.ferry_rss is not None]
        return Memory(rss[0], max(rss), rss[-1])

    def growth(self, size: int | None) -> float | None:
        if self.baseline is None or size is None:
            return None
        return size / self.baseline - 1

    @property
    def ok(self) -> bool | None:
        growth = self.growth(self.peak_after)
        return None if growth is None else growth <= RSS_GROWTH_LIMIT


def bounce_plan(index: int, nodes: dict[str, list[int]]) -> tuple[str, int, bool]:
    """The `index`-th bounce (from 0): (cluster alias, node id, hard). Target and source
    alternate; each goes through its nodes, hard and clean alternating, so every node of
    both clusters is bounced both ways in 12 bounces."""
    alias = ("target", "source")[index % 2]
    turn = index // 2
    ids = nodes[alias]
    return alias, ids[turn % len(ids)], turn % 2 == 0


@dataclass
class Bounces:
    """The bounces done: (seconds since Ferry started, alias, node, hard, seconds taken)."""

    done: list[tuple[float, str, int, bool, float]] = field(default_factory=list)
    error: str | None = None


def run_bounces(root: Path, ferry: Supervised, log: CycleLog, duration: float,
                every: float) -> Bounces:
    """Bounce a broker every `every` seconds from Ferry's start until `duration`; the
    first bounce that fails (a node not back within its time) ends the bouncing, not the
    soak (the stream and Ferry go on; the failure is printed at the end)."""
    nodes = {s.alias: [n.node_id for n in s.nodes] for s in cluster.states_in(root)}
    result = Bounces()
    while True:
        due = every * (len(result.done) + 1)
        if due >= duration:
            break
        time.sleep(max(0.0, due - (time.monotonic() - ferry.began)))
        alias, node, hard = bounce_plan(len(result.done), nodes)
        log.update()
        before = (log.count, ferry.restarts)
        at = time.monotonic() - ferry.began
        try:
            seconds = bounce(root, alias, node, hard)
        except Exception as exc:  # a broker that did not come back: no more bounces
            result.error = f"{alias} node {node} {'hard' if hard else 'clean'}: {exc}"
            print(f"  {_clock(at)}  BOUNCE FAILED, no more bounces: {result.error}",
                  flush=True)
            break
        result.done.append((at, alias, node, hard, seconds))
        log.update()
        print(f"  {_clock(at)}  bounce {len(result.done)}: {alias} node {node} "
              f"{'hard ' if hard else 'clean'} {seconds:6.1f} s   Ferry "
              f"{'running' if ferry.alive() else 'DOWN'}, restarts +"
              f"{ferry.restarts - before[1]}, cycles {log.count - before[0]}", flush=True)
    time.sleep(max(0.0, duration - (time.monotonic() - ferry.began)))
    return result


def behind_by_window(follower: Follower, rate: int, window_s: float) -> list[float]:
    """The worst seconds behind among the records produced in each `window_s` of the
    stream (a record's number over `rate` is about when it was produced)."""
    worst: dict[int, float] = {}
    per_window = rate * window_s
    for number, seconds in follower.behind.items():  # the follower has stopped
        slot = int(number // per_window)
        worst[slot] = max(worst.get(slot, 0.0), seconds)
    return [worst.get(slot, 0.0) for slot in range(max(worst, default=-1) + 1)]


def run(work: Path, rate: int, duration: float, every: float, baseline: float,
        with_mm2: bool) -> bool:
    """The whole soak in `work` (clusters under `work/kafka`, the server under
    `work/spark`, the mirrors' logs and `rss.csv` beside); prints as it goes, then the
    figures. True when every target is met."""
    print(f"soak: {rate} records/s over {PARTITIONS} partitions (RF {REPLICAS}, min ISR 2) "
          f"for {duration:.0f} s, a broker bounced every {every:.0f} s; Ferry continuous"
          + (" and MirrorMaker 2 side by side" if with_mm2 else ""), flush=True)
    with contextlib.ExitStack() as stack:
        mirrored = mirrored_stream(stack, work, rate, with_mm2)
        root, server, stream = mirrored.root, mirrored.server, mirrored.stream
        clusters, followers = mirrored.clusters, mirrored.followers
        ferry, mm2 = mirrored.ferry, mirrored.mm2
        mirrors = {"ferry": FERRY_REMOTE, **({"mm2": MM2_REMOTE} if with_mm2 else {})}
        log = CycleLog(work / "cycles.jsonl")
        monitor = Monitor(work / "rss.csv", ferry, server.pid, stream, followers["ferry"], log)
        monitor.start()
        stack.callback(monitor.join, 10)
        stack.callback(monitor.stop.set)

        def started() -> bool:
            log.update()
            return log.count > 0 and all(bool(f.behind) for f in followers.values())

        wait_until("Ferry's first cycle" + (" and MM2's first records" if with_mm2 else ""),
                   started, START_TIMEOUT_S)
        warm_from = stream.started
        print(f"  {_clock(time.monotonic() - ferry.began)}  mirroring ({log.count} Ferry "
              f"cycles so far); RSS sampled every {SAMPLE_S:.0f} s into {work / 'rss.csv'}",
              flush=True)

        bounces = run_bounces(root, ferry, log, duration, every)

        stream.stop.set()
        stream.join(330)
        produced = stream.started
        log.watch_idle()
        settled = time.monotonic()
        print(f"  {_clock(settled - ferry.began)}  stream stopped at {produced:,} records; "
              "catching up", flush=True)

        def caught_up(name: str) -> bool:
            if name == "ferry":
                log.update()
                return log.idle_seen
            follower = followers[name]
            return (len(follower.behind) >= produced - stream.failed
                    and time.monotonic() - follower.last_arrival > QUIET_S)

        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        caught: dict[str, float | None] = dict.fromkeys(mirrors)
        while time.monotonic() < deadline and None in caught.values():
            for name in mirrors:
                if caught[name] is None and caught_up(name):
                    caught[name] = time.monotonic() - settled
            time.sleep(0.5)
        monitor.stop.set()
        monitor.join(10)
        ferry_code = ferry.stop(300)
        mm2_code = mm2.stop(60) if mm2 is not None else None
        log.update()

        print("  reading back", flush=True)
        source = [read_partition(clusters["source"], TOPIC, p) for p in range(PARTITIONS)]
        tallies: dict[str, Tally] = {
            name: compare(source, [read_partition(clusters["target"], topic, p)
                                   for p in range(PARTITIONS)])
            for name, topic in mirrors.items()}

    held = sum(map(len, source))
    print(f"\nrecords produced {produced:,} (the source took {produced - stream.failed:,}, "
          f"holds {held:,}, each once: {'yes' if held == len(set().union(*source)) else 'NO'})")
    print(f"bounces {len(bounces.done)}: " + ", ".join(
        f"{alias[0]}{node}{'H' if hard else 'C'} {seconds:.0f}"
        for _at, alias, node, hard, seconds in bounces.done)
        + " s (t/s: target/source, node, H/C: hard/clean)")
    if bounces.error:
        print(f"  a bounce FAILED: {bounces.error}")
    print(f"Ferry cycles {log.count:,}, failed {log.failed}, longest {log.longest:.1f} s; "
          f"SIGTERM at the end: Ferry exit {ferry_code}"
          + (f", MM2 exit {mm2_code}" if mm2 is not None else "")
          + " (None: killed after the grace)")

    def caught_text(name: str) -> str:
        seconds = caught[name]
        return "no" if seconds is None else f"{seconds:.0f} s"

    supervised = {"ferry": ferry, **({"mm2": mm2} if mm2 is not None else {})}
    rows = [
        ("records on the remote topic", *(f"{t.copies:,}" for t in tallies.values())),
        ("records lost", *(f"{t.lost:,}" for t in tallies.values())),
        ("records doubled", *(f"{t.doubled:,}" for t in tallies.values())),
        ("in order", *("yes" if t.in_order else "NO" for t in tallies.values())),
        ("process restarts", *(str(s.restarts) for s in supervised.values())),
        ("failed cycles", str(log.failed), *(["-"] if mm2 is not None else [])),
        ("worst behind (s, once mirroring)", *(worst_behind(f, warm_from)
                                               for f in followers.values())),
        ("caught up after the stream stopped", *(caught_text(n) for n in mirrors)),
    ]
    if any(t.foreign for t in tallies.values()):
        rows.append(("records not from the source", *(f"{t.foreign:,}"
                                                      for t in tallies.values())))
    heads = {"ferry": "Ferry", "mm2": "MirrorMaker 2"}
    print(f"\n  {'':<36}" + "".join(f"{heads[n]:>16}" for n in mirrors))
    for label, *cells in rows:
        print(f"  {label:<36}" + "".join(f"{cell:>16}" for cell in cells))
    for name, s in supervised.items():
        if s.exits:
            print(f"  {heads[name]} exits: " + ", ".join(f"code {c} at {t:.0f} s"
                                                         for t, c in s.exits))
    windows = behind_by_window(followers["ferry"], rate, every)
    print(f"  Ferry worst behind per {every:.0f} s of the stream: "
          + ", ".join(f"{w:.1f}" for w in windows))

    memory = Memory.of(monitor.samples, baseline)
    spark = [s.spark_rss for s in monitor.samples if s.spark_rss is not None]

    def growth_text(size: int | None) -> str:
        growth = memory.growth(size)
        return "" if growth is None else f" ({growth:+.1%})"

    print(f"\n  Ferry loop RSS ({len(monitor.samples)} samples, {work / 'rss.csv'}): "
          f"at {baseline:.0f} s {_mib(memory.baseline)} MiB, max after "
          f"{_mib(memory.peak_after)} MiB{growth_text(memory.peak_after)}, at the end "
          f"{_mib(memory.end)} MiB{growth_text(memory.end)}")
    if spark:
        print(f"  Spark Connect server RSS (for information): first {_mib(spark[0])} MiB, "
              f"max {_mib(max(spark))} MiB, at the end {_mib(spark[-1])} MiB")
    print("  Ferry stderr: " + log_counts(work / "ferry.err", {
        "librdkafka": r"^%\d\|", "WARNING": " WARNING ", "ERROR": " ERROR "}))
    if mm2 is not None:
        print("  MM2 log: " + log_counts(work / "mm2-mm2src.log",
                                         {"WARN": r"\] WARN ", "ERROR": r"\] ERROR "}))

    ferry_tally = tallies["ferry"]
    verdicts = [
        ("0 lost, 0 doubled, in order", ferry_tally.lost == 0 and ferry_tally.doubled == 0
         and ferry_tally.in_order and ferry_tally.foreign == 0),
        ("0 restarts", ferry.restarts == 0),
        ("caught up", caught["ferry"] is not None),
        ("every bounce done", bounces.error is None),
        (f"RSS within +{RSS_GROWTH_LIMIT:.0%} after {baseline:.0f} s", memory.ok),
    ]
    print()
    for label, ok in verdicts:
        print(f"  {'PASS' if ok else 'n/a ' if ok is None else 'FAIL'}  {label}"
              + ("  (the run ended before the baseline)" if ok is None else ""))
    return all(ok is not False for _label, ok in verdicts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1000, help="records/s (default 1000)")
    parser.add_argument("--duration", type=float, default=7200,
                        help="seconds of stream from Ferry's start (default 7200)")
    parser.add_argument("--bounce-every", type=float, default=600,
                        help="seconds between two broker bounces (default 600)")
    parser.add_argument("--baseline", type=float, default=600,
                        help="seconds after Ferry's start of the RSS the later ones are "
                             "compared with (default 600)")
    parser.add_argument("--mm2", action="store_true",
                        help="MirrorMaker 2 mirrors the stream too, side by side")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work directory, kept with the logs (cycles.jsonl, ferry.err, "
                             "rss.csv); default: a temporary one")
    args = parser.parse_args()
    with work_dir(args.dir, "ferry-soak-") as work:
        ok = run(work, args.rate, args.duration, args.bounce_every, args.baseline, args.mm2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

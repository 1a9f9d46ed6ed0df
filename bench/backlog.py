"""Backlog benchmark: N records of S bytes over P partitions, mirrored by one
`ferry mirror` cycle, against the machine's limits measured in the same run.

    .venv/bin/python bench/backlog.py [--records 1000000] [--size 1024] [--partitions 8]

Prints the consume-only rate from the source and the produce-only rate to the target
(confluent-kafka, the copy's producer settings, the copy's parallelism), then the copy
alone (records / the slowest lane's time, from the runs table) and the whole cycle
(JVM start included), and the copy's share of the smaller limit (target: >= 60%).

Then the same backlog through a warm Spark: a local Spark Connect server (`ferry spark
up`), warmed by one small cycle of another flow, mirrors it as a second flow (its own
remote topic); its whole cycle and an idle cycle are printed beside the spark-submit ones,
and the idle cycles of `ferry mirror --continuous` (one process, cycles back to back).

Last, the peers in the same run: the bare transactional copy loop (confluent-kafka, one
process per lane, 50k-record transactions, no bookkeeping) and MirrorMaker 2 (dedicated
mode, JVM start included, until the last record is on the target), and the ratios the
targets are stated in.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    bare_copy,
    consume,
    create_topic,
    end_offsets,
    ferry_mirror,
    local_clusters,
    mm2_dedicated,
    produce,
    rate,
    write_config,
)
from ferry.local import spark_server
from ferry.state.reader import rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--lanes", type=int, default=2)
    args = parser.parse_args()
    n, size, parts = args.records, args.size, args.partitions
    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as tmp, \
            local_clusters(Path(tmp) / "kafka") as clusters:
        print(f"backlog: {n:,} records x {size} B over {parts} partitions, {args.lanes} lanes")
        create_topic(clusters["source"], "bench", parts, {"retention.ms": "-1"})
        seconds = produce(clusters["source"], "bench", parts, n, size)
        print(f"  source data written        {rate(n, size, seconds)}")
        consume_s = consume(clusters["source"], "bench", parts, n, processes=args.lanes)
        print(f"  limit: consume-only        {rate(n, size, consume_s)}")
        create_topic(clusters["target"], "bench-produce", parts)
        produce_s = produce(clusters["target"], "bench-produce", parts, n, size,
                            processes=args.lanes, transactional=True)
        print(f"  limit: produce-only (txn)  {rate(n, size, produce_s)}")
        config = write_config(Path(tmp) / "mm2.properties", clusters, "bench",
                              Path(tmp) / "state", f"tasks.max = {args.lanes}\n")
        cycle_s, _ = ferry_mirror(config)
        runs = rows(str(Path(tmp) / "state" / "runs"), "source->target")
        copied = sum(r["records"] for r in runs)
        lane_s = slowest_lane(runs, args.lanes)
        assert copied == n, f"copied {copied} of {n}"
        print(f"  copy alone (slowest lane)  {rate(n, size, lane_s)}")
        print(f"  whole cycle (JVM incl.)    {rate(n, size, cycle_s)}")
        limit = max(consume_s, produce_s)
        print(f"  copy / smaller limit = {limit / lane_s:.0%}  (target >= 60%); "
              f"cycle / smaller limit = {limit / cycle_s:.0%}")
        idle_s, idle = ferry_mirror(config)
        print(f"  idle cycle                 {idle_s:.1f} s (idle={idle['idle']}, target < 5 s)")
        warm_s = warm_cycle(Path(tmp), clusters, n, size, args.lanes, cycle_s)
        bare_s = bare_copy(clusters, "bench", "bench-bare", parts, n, processes=args.lanes)
        print(f"  bare transactional loop    {rate(n, size, bare_s)}")
        mm2_s = mirror_maker(Path(tmp), clusters, n, parts)
        print(f"  MirrorMaker 2 (dedicated)  {rate(n, size, mm2_s)}")
        print(f"  copy alone / bare loop = {bare_s / lane_s:.2f} (target >= 0.85); "
              f"MM2 time / warm cycle = {mm2_s / warm_s:.2f}x (target >= 3x); "
              f"MM2 time / spark-submit cycle = {mm2_s / cycle_s:.2f}x (target >= 2x)")
    return 0


def slowest_lane(runs: list[dict[str, Any]], lanes: int) -> float:
    """The slowest lane's copy time: a lane runs its writer slots one after another, and a
    `runs` row's `lane` is its writer slot, its `seconds` the time since that writer began."""
    from ferry.core.lanes import lanes_of

    per_slot: dict[int, float] = {}
    for r in runs:
        per_slot[r["lane"]] = max(per_slot.get(r["lane"], 0.0), float(r["seconds"]))
    return max(sum(per_slot[s] for s in slots) for slots in lanes_of(per_slot, lanes))


def mirror_maker(tmp: Path, clusters: dict[str, str], n: int, partitions: int) -> float:
    """Seconds from MM2's start until all `n` records are on its remote topic."""
    started = time.monotonic()
    process = mm2_dedicated(tmp, clusters, "mm2src", "bench", tasks=partitions)
    try:
        while end_offsets(clusters["target"], "mm2src.bench", partitions) < n:
            if process.poll() is not None:
                raise SystemExit(f"MirrorMaker 2 exited ({process.returncode}); see its log")
            time.sleep(0.2)
        return time.monotonic() - started
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(60)


def continuous_idle(config: str, flow: str, seconds: float = 15) -> list[float]:
    """The seconds of each idle cycle of `ferry mirror --continuous` after its first (which
    also runs the paced steps: heartbeats, config and ACL sync, checkpoints)."""
    result = subprocess.run([str(Path(sys.executable).parent / "ferry"), "mirror", config,
                             "--flow", flow, "--continuous", "--for", f"{seconds}s", "--json"],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"ferry mirror --continuous failed: {result.stderr[-3000:]}")
    cycles = [json.loads(line) for line in result.stdout.splitlines()]
    assert all(c["idle"] for c in cycles), "the continuous idle pass found work"
    return [float(c["seconds"]) for c in cycles[1:]]


def warm_cycle(tmp: Path, clusters: dict[str, str], n: int, size: int, lanes: int,
               submit_s: float) -> float:
    """The backlog again, as another flow, through a warm local Spark Connect server;
    returns the whole cycle's seconds."""
    server = spark_server.up(tmp / "spark")
    try:
        extra = f"tasks.max = {lanes}\nferry.spark.master = {server.url}\n"
        create_topic(clusters["source"], "warmup", 2)
        produce(clusters["source"], "warmup", 2, 1000, size)
        warmup = write_config(tmp / "warmup.properties", clusters, "warmup", tmp / "wstate",
                              extra, source="warmup")
        first_s, _ = ferry_mirror(warmup, "warmup->target")
        print(f"  warm Spark: server up, first (warm-up) cycle {first_s:.1f} s")
        config = write_config(tmp / "warm.properties", clusters, "bench", tmp / "warm-state",
                              extra, source="edge")
        cycle_s, _ = ferry_mirror(config, "edge->target")
        runs = rows(str(tmp / "warm-state" / "runs"), "edge->target")
        copied = sum(r["records"] for r in runs)
        assert copied == n, f"copied {copied} of {n} through the warm Spark"
        print(f"  whole cycle (warm Spark)   {rate(n, size, cycle_s)}  "
              f"({submit_s / cycle_s:.2f}x faster than spark-submit)")
        idle_s, idle = ferry_mirror(config, "edge->target")
        print(f"  idle cycle (warm Spark)    {idle_s:.1f} s (idle={idle['idle']}, a process "
              "of its own)")
        idles = sorted(continuous_idle(config, "edge->target"))
        print(f"  idle cycle (continuous)    median {statistics.median(idles):.2f} s, max "
              f"{idles[-1]:.2f} s over {len(idles)} cycles (target <= 1 s)")
        return cycle_s
    finally:
        spark_server.down(tmp / "spark")


if __name__ == "__main__":
    sys.exit(main())

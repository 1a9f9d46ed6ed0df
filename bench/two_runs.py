"""Two runs of one flow at once, with different lane counts, round after round: what each
run says, and what reaches the target.

    .venv/bin/python bench/two_runs.py [--rounds 3] [--records 160000] [--dir DIR]

Two local clusters; a source topic `stream` of 8 partitions. The flow `source->target` is
set up by one idle cycle. Then, each round, `--records` numbered records (100 bytes) are
written to the source, and two `ferry mirror` runs of the flow start at the same moment,
as a scheduled run and an operator's run would: one with `tasks.max = 2` on `local[2]`,
one with `tasks.max = 8` on `local[8]` (each a spark-submit job). Both hold the same
writer id per partition (the flow's `ferry.writers` slots), so Kafka lets only one of
them write a partition at a time.

Per round it prints each run's exit code, records copied and, for a run that stopped, its
one line. After the last round one more run copies whatever a stopped run left; the remote
topic is then read back (read_committed) and compared with the source per partition:
records lost, records doubled, in order.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer

from bench.bounce import compare, read_partition
from bench.common import create_topic, local_clusters, work_dir, write_config

TOPIC = "stream"
PARTITIONS = 8
REMOTE = f"source.{TOPIC}"
FLOW = "source->target"


def produce_numbered(bootstrap: str, first: int, count: int) -> None:
    """Records `first`..`first + count - 1`, each value its number (zero-padded to 100
    bytes), round-robin over the partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "enable.idempotence": True, "log_level": 3})
    for n in range(first, first + count):
        while True:
            try:
                producer.produce(TOPIC, str(n).zfill(100).encode(), partition=n % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def mirror(config: str, master: str, into: dict[str, object]) -> None:
    """One `ferry mirror --json` run; its exit code, records and why it stopped (the copy
    job's failure line, else the last error line)."""
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "ferry"), "mirror", config,
                           "--flow", FLOW, "--master", master, "--json"],
                          capture_output=True, text=True, check=False)
    into["exit"], into["seconds"] = done.returncode, time.monotonic() - started
    try:
        report = json.loads(done.stdout) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        report = {}
    into["records"] = ((report.get("steps") or {}).get("record") or {}).get("records", 0)
    lines = done.stderr.splitlines()
    said = ([line for line in lines if line.startswith("ferry copy job: failed:")]
            or [line for line in lines
                if ("ERROR" in line or line.startswith("ferry:")) and "rdkafka" not in line])
    into["why"] = said[-1][-400:] if said else done.stderr[-400:]


def run(work: Path, rounds: int, records: int) -> None:
    with local_clusters(work / "clusters") as clusters:
        create_topic(clusters["source"], TOPIC, PARTITIONS)
        state = work / "state"
        two = write_config(work / "two.properties", clusters, TOPIC, state, "tasks.max = 2\n")
        eight = write_config(work / "eight.properties", clusters, TOPIC, state,
                             "tasks.max = 8\n")
        first: dict[str, object] = {}
        mirror(two, "local[2]", first)  # the flow set up: remote topic, offset map
        if first["exit"] != 0:
            raise SystemExit(f"the first, idle run failed: {first['why']}")
        print(f"{rounds} rounds of {records:,} records; runs: tasks.max=2 on local[2] and "
              "tasks.max=8 on local[8], started together")
        both_refused = 0
        written = 0
        for n in range(1, rounds + 1):
            produce_numbered(clusters["source"], written, records)
            written += records
            runs: dict[str, dict[str, object]] = {"2 lanes": {}, "8 lanes": {}}
            threads = [threading.Thread(target=mirror, args=(two, "local[2]", runs["2 lanes"])),
                       threading.Thread(target=mirror,
                                        args=(eight, "local[8]", runs["8 lanes"]))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            stopped = [name for name, r in runs.items() if r["exit"] != 0]
            both_refused += len(stopped) == 2
            print(f"round {n}: " + "; ".join(
                f"{name}: exit {r['exit']}, {r['records']:,} records, {r['seconds']:.0f} s"
                for name, r in runs.items()))
            for name in stopped:
                print(f"  {name} stopped: {runs[name]['why']}")
        last: dict[str, object] = {}
        mirror(two, "local[2]", last)
        print(f"catch-up run: exit {last['exit']}, {last['records']:,} records")
        source = [read_partition(clusters["source"], TOPIC, p) for p in range(PARTITIONS)]
        remote = [read_partition(clusters["target"], REMOTE, p) for p in range(PARTITIONS)]
        tally = compare(source, remote)
        print(f"source {written:,} records; remote {tally.copies:,}: lost {tally.lost}, "
              f"doubled {tally.doubled}, foreign {tally.foreign}, "
              f"in order: {'yes' if tally.in_order else 'NO'}; rounds where both runs "
              f"stopped: {both_refused} of {rounds}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--records", type=int, default=160_000,
                        help="records written before each round (default 160000)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work directory (default: a temporary one)")
    args = parser.parse_args()
    with work_dir(args.dir, "ferry-two-runs-") as work:
        run(work, args.rounds, args.records)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What continuous mirroring leaves behind per day: offset-map entries, the offset-map
topic's bytes on the target's disk, and the Delta state's files and bytes.

    .venv/bin/python bench/map_growth.py [--rate 200] [--seconds 180] [--warmup 30]
                                         [--set KEY=VALUE ...] [--dir DIR]

A producer writes `--rate` records/s (16-byte values) over 4 partitions for `--seconds`;
`ferry mirror --continuous` mirrors them on the local runner with the defaults (a cycle
at most every `ferry.continuous.interval.seconds`, Delta appended behind the copies every
`ferry.state.record.interval.seconds`); `--set` adds config lines, e.g.
`--set ferry.continuous.interval.seconds=0.5`. Once every record is on the target, the
loop is stopped with SIGTERM. Counted over the measured window (after `--warmup`, up to
the moment every record was copied, before the loop's closing batch): the offset-map
entries committed, the topic's log bytes on the target's disk (what its brokers keep:
records, batch headers and each transaction's commit marker), and the Delta tables' data
files, their bytes and log commits (Delta batches land once per
`ferry.state.record.interval.seconds`, so a window counts whole batches: give `--seconds`
several intervals); each is then given per day at the same rate. The offset-map
topic is kept forever (docs/state.md, "Retention"), so its figure per day is its growth.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bench.common import create_topic, local_clusters, work_dir, write_config

PARTITIONS = 4
TOPIC = "stream"
MAP_TOPIC = "ferry-offset-map.source.internal"
DAY = 86_400


def stream(bootstrap: str, rate: float, seconds: float) -> int:
    """Write `rate` records/s for `seconds`; how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    started, sent = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            try:
                producer.produce(TOPIC, f"{sent:016d}".encode(), partition=sent % PARTITIONS)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    assert producer.flush(30) == 0
    return sent


def copied(cycles: list[dict[str, Any]]) -> int:
    """Records the loop's cycles say they copied (a remote partition's offsets count its
    commit markers too, so its end is not a count of records)."""
    return sum(int((c.get("steps") or {}).get("record", {}).get("records", 0))
               for c in cycles)


def entries(bootstrap: str) -> int:
    """Committed records (entries) of the offset-map topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "map-growth",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "log_level": 3})
    count = 0
    try:
        consumer.assign([TopicPartition(MAP_TOPIC, 0, 0)])
        while True:
            for msg in consumer.consume(10_000, 5.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return count
                    raise SystemExit(f"reading {MAP_TOPIC}: {err}")
                count += 1
    finally:
        consumer.close()


def map_log_bytes(kafka: Path) -> int:
    """The offset-map topic's log segments on the target broker's disk."""
    return sum(f.stat().st_size for f in kafka.glob(f"target/**/{MAP_TOPIC}-0/*.log"))


def delta(table: Path) -> tuple[int, int, int]:
    """A Delta table's data files (current and replaced alike), their bytes, and its log's
    commit files."""
    files = [f for f in table.glob("**/*.parquet") if "_delta_log" not in f.parts]
    return (len(files), sum(f.stat().st_size for f in files),
            len(list(table.glob("_delta_log/*.json"))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--warmup", type=float, default=30)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    extra = "ferry.copy.runner = local\n" + "".join(
        f"{line.split('=', 1)[0].strip()} = {line.split('=', 1)[1].strip()}\n"
        for line in args.set)
    with work_dir(args.dir, "ferry-map-growth-") as tmp, \
            local_clusters(tmp / "kafka") as clusters:
        create_topic(clusters["source"], TOPIC, PARTITIONS)
        state = tmp / "state"
        config = write_config(tmp / "mm2.properties", clusters, TOPIC, state, extra)
        print(f"map growth: {args.rate:g} records/s over {PARTITIONS} partitions for "
              f"{args.seconds:g} s (warm-up {args.warmup:g} s left out); config: "
              f"{extra.strip().replace(chr(10), '; ')}", flush=True)
        loop = subprocess.Popen(
            [str(Path(sys.executable).parent / "ferry"), "mirror", config, "--flow",
             "source->target", "--continuous", "--json"],
            stdout=subprocess.PIPE, stderr=(tmp / "ferry.log").open("wb"), text=True)
        cycles: list[dict[str, Any]] = []
        reader = threading.Thread(target=lambda: cycles.extend(
            json.loads(line) for line in loop.stdout or () if line.startswith("{")),
            daemon=True)
        reader.start()
        sent = stream(clusters["source"], args.rate, args.warmup)
        marks = (entries(clusters["target"]), map_log_bytes(tmp / "kafka"),
                 delta(state / "offset_map"), delta(state / "runs"), len(cycles))
        began = time.monotonic()
        sent += stream(clusters["source"], args.rate, args.seconds)
        deadline = time.monotonic() + 120
        while copied(cycles) < sent and time.monotonic() < deadline:
            time.sleep(0.5)
        window = time.monotonic() - began
        on_target = copied(cycles)
        # counted before the loop stops: its closing batch is not the window's
        counted = entries(clusters["target"]) - marks[0]
        log_bytes = map_log_bytes(tmp / "kafka") - marks[1]
        map_files, map_bytes, map_commits = (a - b for a, b in zip(
            delta(state / "offset_map"), marks[2], strict=True))
        run_files, run_bytes, run_commits = (a - b for a, b in zip(
            delta(state / "runs"), marks[3], strict=True))
        copying = [c for c in cycles[marks[4]:] if not c.get("idle")]
        loop.send_signal(signal.SIGTERM)
        loop.wait(120)
        reader.join(10)
        per_day = DAY / window

        def line(what: str, value: float, unit: str = "") -> None:
            print(f"  {what:<44} {value:>14,.0f}{unit:<4} {value * per_day:>16,.0f}{unit}")

        print(f"records {sent:,} sent, {on_target:,} copied; window {window:.0f} s; "
              f"cycles {len(cycles) - marks[4]:,} ({len(copying):,} copying)")
        print(f"  {'':<44} {'window':>18} {'per day':>16}")
        line("offset-map entries", counted)
        line("offset-map topic on the target's disk", log_bytes, " B")
        line("Delta offset_map: data files", map_files)
        line("Delta offset_map: bytes of data", map_bytes, " B")
        line("Delta offset_map: log commits", map_commits)
        line("Delta runs: data files", run_files)
        line("Delta runs: bytes of data", run_bytes, " B")
        line("Delta runs: log commits", run_commits)
        if counted:
            print(f"  per entry: {log_bytes / counted:,.0f} B in the topic, "
                  f"{map_bytes / counted:,.0f} B in Delta; a year of the topic at this "
                  f"rate: {log_bytes * per_day * 365 / 2**30:,.1f} GiB")


if __name__ == "__main__":
    main()

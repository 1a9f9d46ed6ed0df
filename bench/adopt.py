"""Adoption benchmark: taking over one 1M-record partition from MirrorMaker 2, and what a
consumer group re-reads when it then fails over (Ferry's exact map beside MM2's own
checkpoint translation, measured in the same run).

MM2 (dedicated mode) mirrors the backlog and is stopped gracefully (it flushes its
progress); a group on the source has committed half way, after MM2 copied it, so MM2's
checkpoint comes from its sparse offset syncs as it would in production. Then
`ferry adopt --from mm2 --execute` aligns the partition record by record and writes the
exact offset map, and `ferry translate` places the group on the target.

    .venv/bin/python bench/adopt.py [--records 1000000] [--size 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, TopicPartition

from bench.common import (
    create_topic,
    end_offsets,
    local_clusters,
    mm2_dedicated,
    produce,
    write_config,
)

TOPIC, GROUP = "orders", "billing"


def ferry(*args: str) -> tuple[float, dict[str, object]]:
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "ferry"), *args, "--json"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ferry {args[0]} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.monotonic() - started, json.loads(done.stdout)


def value_at(bootstrap: str, topic: str, offset: int) -> bytes | None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-peek",
                         "log_level": 3})
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        for _ in range(50):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                return msg.value()
        return None
    finally:
        consumer.close()


def mm2_checkpoint(config: str, remote: str) -> int | None:
    from ferry.config import load_config
    from ferry.kafka.groups import read_checkpoints

    flow = load_config(config).flow("source->target")
    found = [c.downstream_offset for c in read_checkpoints(flow, "source.checkpoints.internal")
             if c.group == GROUP and c.topic == remote and c.partition == 0]
    return found[-1] if found else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    half = args.records // 2
    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as tmp, \
            local_clusters(Path(tmp) / "kafka") as clusters:
        tmp_path = Path(tmp)
        remote = f"source.{TOPIC}"
        create_topic(clusters["source"], TOPIC, 1, {"retention.ms": "-1"})
        produce(clusters["source"], TOPIC, 1, args.records, args.size, processes=1)
        config = write_config(tmp_path / "mm2.properties", clusters, TOPIC, tmp_path / "state")
        mm2 = mm2_dedicated(tmp_path, clusters, "source", TOPIC, tasks=1, extra=(
            f"emit.checkpoints.enabled = true\nemit.checkpoints.interval.seconds = 1\n"
            f"groups = {GROUP}\nrefresh.groups.interval.seconds = 1\n"))
        started = time.monotonic()
        try:
            while end_offsets(clusters["target"], remote, 1) < args.records:
                time.sleep(0.5)
            mm2_seconds = time.monotonic() - started
            # the group read half, after MM2 copied it
            committer = Consumer({"bootstrap.servers": clusters["source"], "group.id": GROUP,
                                  "log_level": 3})
            committer.commit(offsets=[TopicPartition(TOPIC, 0, half)], asynchronous=False)
            committer.close()
            deadline = time.monotonic() + 120
            while mm2_checkpoint(config, remote) is None and time.monotonic() < deadline:
                time.sleep(1)
        finally:
            os.killpg(mm2.pid, signal.SIGTERM)  # graceful: MM2 flushes its progress
            mm2.wait(120)
        adopt_s, report = ferry("adopt", config, "--flow", "source->target", "--from", "mm2",
                                "--settle", "0", "--execute")
        (part,) = report["partitions"]  # type: ignore[attr-defined]
        _, found = ferry("translate", config, "--flow", "source->target", "--group", GROUP)
        (translated,) = found["partitions"]  # type: ignore[attr-defined]
        ferry_offset = translated["target_offset"]
        wanted = value_at(clusters["source"], TOPIC, half)
        ferry_reread = 0 if value_at(clusters["target"], remote, ferry_offset) == wanted \
            else None
        mm2_offset = mm2_checkpoint(config, remote)
        print(f"adopt: 1 partition of {args.records:,} records x {args.size} B that MM2 "
              f"mirrored ({mm2_seconds:.1f} s)")
        print(f"  ferry adopt --execute: {adopt_s:.1f} s wall "
              f"({part['seconds']:.1f} s aligning and writing the partition), "
              f"{part['matched']:,} records paired, {part['missing']} missing, "
              f"{part['doubled']} doubled, {part['extra']} extra, {part['altered']} altered, "
              f"{part['entries']} offset-map entries")
        print(f"  failover of {GROUP} (committed at {half:,} on the source): Ferry puts it at "
              f"{ferry_offset:,}, re-reads {ferry_reread}; MM2's checkpoint puts it at "
              f"{mm2_offset}, re-reads "
              f"{'-' if mm2_offset is None else ferry_offset - mm2_offset:,}")
        return 0 if ferry_reread == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

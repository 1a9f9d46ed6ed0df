"""Failover benchmark: how many records a consumer group re-reads (and loses) when it moves
from the source to the target with Ferry's checkpoints.

10 partitions, 100,000 records; a consumer group on the source reads and commits half of
them; `ferry mirror` copies everything, `ferry checkpoints` translates the group (with
sync.group.offsets.enabled=true); the same group then reads the remote topic on the
target from where it was put. MM2 re-reads up to `offset.lag.max` (100) records per
partition by design; Ferry's target is 0.

    .venv/bin/python bench/failover.py [--partitions 10] [--records 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bench.common import create_topic, ferry_mirror, local_clusters, write_config

TOPIC, GROUP = "orders", "billing"


def produce(bootstrap: str, partitions: int, records: int) -> None:
    """Records with unique values, so every read can be told apart."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "enable.idempotence": True, "log_level": 3})
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, f"r{i:08d}".encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def consume(bootstrap: str, topic: str, partitions: int, limit: int | None) -> list[bytes]:
    """Read as GROUP from its committed offsets (earliest where none) up to `limit` records
    (spread over the partitions, each a little differently) or the end; commit what was
    read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "isolation.level": "read_committed",
                         "log_level": 3})
    committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    consumer.assign([TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else -2)
                     for tp in committed])
    read: list[bytes] = []
    ended: set[int] = set()
    quota = {p: (limit // partitions + 37 * p - 37 * partitions // 2) if limit else None
             for p in range(partitions)}  # uneven progress per partition
    taken = dict.fromkeys(range(partitions), 0)
    after: dict[int, int] = {}
    while len(ended) < partitions:
        for msg in consumer.consume(500, 1.0):
            p = msg.partition() or 0
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                ended.add(p)
            elif p not in ended:
                read.append(msg.value() or b"")
                taken[p] += 1
                after[p] = (msg.offset() or 0) + 1
                if taken[p] == quota[p]:
                    ended.add(p)
    if after:  # exactly what was read (a batch may have fetched more)
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in after.items()],
                        asynchronous=False)
    consumer.close()
    return read


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as tmp, \
            local_clusters(Path(tmp) / "kafka") as clusters:
        create_topic(clusters["source"], TOPIC, args.partitions)
        produce(clusters["source"], args.partitions, args.records)
        before = consume(clusters["source"], TOPIC, args.partitions, args.records // 2)
        config = write_config(Path(tmp) / "mm2.properties", clusters, TOPIC,
                              Path(tmp) / "state", "sync.group.offsets.enabled = true\n")
        ferry_mirror(config)
        started = time.monotonic()
        result = subprocess.run(
            [str(Path(sys.executable).parent / "ferry"), "checkpoints", config, "--flow",
             "source->target", "--execute", "--json"], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise SystemExit(f"ferry checkpoints failed:\n{result.stderr[-3000:]}")
        seconds = time.monotonic() - started
        report = json.loads(result.stdout)
        after = consume(clusters["target"], f"source.{TOPIC}", args.partitions, None)
        seen = set(before)
        reread = sum(1 for v in after if v in seen)
        lost = args.records - len(seen | set(after))
        print(f"failover: {args.partitions} partitions, {args.records:,} records, group "
              f"{GROUP} committed {len(before):,} on the source")
        print(f"  translated {len(report['translations'])} group partitions, "
              f"{report['emitted']} checkpoints, in {seconds:.1f} s (ferry checkpoints)")
        print(f"  after failover the group read {len(after):,} records on the target")
        print(f"  re-read {reread:,}   lost {lost:,}   duplicates read "
              f"{len(after) - len(set(after)):,}   (MM2: up to offset.lag.max per partition)")
        return 0 if reread == 0 and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

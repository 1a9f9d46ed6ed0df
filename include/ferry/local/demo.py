"""The demo's sample data and report (`scripts/demo.sh` runs them around one DAG run).

    python -m ferry.local.demo seed CONFIG     # sample topics on the source cluster
    python -m ferry.local.demo report CONFIG   # source vs remote counts, offset map, a look-up
"""

from __future__ import annotations

import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ferry.config import Flow, load_config
from ferry.config.clients import LIBRDKAFKA_LOG

TOPICS = {
    "orders": (3, {}),
    "customers": (1, {"cleanup.policy": "compact"}),
    "payments": (1, {}),
}


def seed(flow: Flow) -> None:
    bootstrap = str(flow.consumer.settings["bootstrap.servers"])
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": LIBRDKAFKA_LOG}
    admin = AdminClient(conf)
    futures = admin.create_topics([NewTopic(name, parts, 1, config=cfg)
                                   for name, (parts, cfg) in TOPICS.items()])
    for future in futures.values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "log_level": 3, "logger": LIBRDKAFKA_LOG})
    for i in range(3000):  # headers, null keys, CreateTime
        producer.produce("orders", key=None if i % 10 == 0 else f"order-{i}".encode(),
                         value=f'{{"order": {i}, "amount": {i % 97}}}'.encode(),
                         partition=i % 3, headers=[("source", b"demo"), ("seq", str(i).encode())])
    for i in range(200):  # a compacted topic with tombstones
        key = f"customer-{i % 50}".encode()
        producer.produce("customers", key=key, value=None if i % 17 == 0 else
                         f'{{"customer": {i % 50}, "version": {i // 50}}}'.encode())
    producer.flush(30)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ferry-demo-payments",
                    "log_level": 3, "logger": LIBRDKAFKA_LOG})
    txn.init_transactions(30)
    for batch, commit in ((0, True), (1, False), (2, True)):  # one aborted transaction
        txn.begin_transaction()
        for i in range(100):
            txn.produce("payments", key=f"payment-{batch}-{i}".encode(),
                        value=f'{{"batch": {batch}, "n": {i}}}'.encode())
        txn.flush(30)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    print("seeded: orders (3 partitions, 3000 records with headers and null keys), customers "
          "(compacted, tombstones), payments (3 transactions, one aborted)")


def _count(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ferry-demo-count",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, "logger": LIBRDKAFKA_LOG})
    total = 0
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                err = msg.error()
                if err is None:
                    total += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition() or 0)
    finally:
        consumer.close()
    return total


def report(flow: Flow, path: str) -> None:
    from ferry.core.tables import StatePaths
    from ferry.state.reader import rows
    from ferry.steps.lookup import find

    source = str(flow.consumer.settings["bootstrap.servers"])
    target = str(flow.producer.settings["bootstrap.servers"])
    mapped = rows(StatePaths(flow.ferry.state_dir).offset_map, flow.name)
    print(f"\n{'topic':<12} {'source records':>15} {'remote topic':<18} {'remote records':>15} "
          f"{'offset-map rows':>16}")
    for topic, (partitions, _) in TOPICS.items():
        remote = flow.remote_topic(topic)
        rows_for = sum(1 for r in mapped if r["source_topic"] == topic)
        print(f"{topic:<12} {_count(source, topic, partitions):>15} {remote:<18} "
              f"{_count(target, remote, partitions):>15} {rows_for:>16}")
    print("\nlook-ups (ferry offsets ... --topic payments --partition 0 --source-offset N):")
    for offset in (0, 150, 205):
        print("  " + find(flow, "payments", 0, offset).text())
    print(f"\nconfig: {path}\nstate:  {flow.ferry.state_dir}")


def main(argv: list[str]) -> int:
    command, path = argv
    flow = load_config(path).enabled_flows[0]
    if command == "seed":
        seed(flow)
    else:
        report(flow, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

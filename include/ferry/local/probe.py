"""Readiness of a local cluster, through a real client (adapter: uses confluent_kafka)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ferry.errors import TransientError

Settings = Mapping[str, str]
Config = dict[str, str | int | float | bool]


def _config(bootstrap: str, settings: Settings | None, **extra: str | int | float | bool
            ) -> Config:
    """librdkafka config: the caller's client settings (security), then `bootstrap`."""
    return {**(settings or {}), "bootstrap.servers": bootstrap, **extra}


def answers(bootstrap: str, timeout: float = 3.0, settings: Settings | None = None) -> bool:
    """True when the cluster returns metadata within `timeout` seconds. `settings` are
    librdkafka client settings (e.g. SASL_SSL credentials); PLAINTEXT without them."""
    admin = AdminClient(_config(bootstrap, settings, log_level=0))
    try:
        admin.list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def wait_ready(bootstrap: str, deadline: float, alive: Callable[[], bool],
               settings: Settings | None = None, brokers: int = 1) -> None:
    """Wait until the cluster answers with all its `brokers` registered, then prove a
    produce and a consume round trip (with the client `settings`: a secure cluster needs
    its super user's)."""
    while registered(bootstrap, settings) < brokers:
        if not alive():
            raise TransientError("a broker process exited")
        if time.monotonic() > deadline:
            raise TransientError(f"not all {brokers} broker(s) registered before the deadline")
        time.sleep(0.5)
    _round_trip(bootstrap, deadline, settings)


def registered(bootstrap: str, settings: Settings | None = None, timeout: float = 1.0) -> int:
    """How many brokers the cluster's metadata lists (0 when it does not answer)."""
    admin = AdminClient(_config(bootstrap, settings, log_level=0))
    try:
        return len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return 0


def under_replicated(bootstrap: str, settings: Settings | None = None) -> int | None:
    """How many partitions have fewer in-sync replicas than replicas, or no leader; None
    when the cluster does not answer. 0 means every partition is fully replicated again
    (after a node's restart, before the next one's: a rolling restart's step)."""
    admin = AdminClient(_config(bootstrap, settings, log_level=0))
    try:
        topics = admin.list_topics(timeout=5).topics
    except KafkaException:
        return None
    return sum(1 for t in topics.values() for p in t.partitions.values()
               if p.leader < 0 or len(p.isrs) < len(p.replicas))


def _round_trip(bootstrap: str, deadline: float, settings: Settings | None) -> None:
    topic = f"ferry-ready-probe-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(_config(bootstrap, settings))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    try:
        producer = Producer(_config(bootstrap, settings, acks="all"))
        payload = uuid.uuid4().bytes
        while True:
            producer.produce(topic, value=payload)
            if producer.flush(5) == 0:
                break
            if time.monotonic() > deadline:
                raise TransientError("produce did not complete before the deadline")
        consumer = Consumer({**_config(bootstrap, settings), "group.id": topic,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe([topic])
            while True:
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None and msg.value() == payload:
                    return
                if time.monotonic() > deadline:
                    raise TransientError("consume did not return the probe record in time")
        finally:
            consumer.close()
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)

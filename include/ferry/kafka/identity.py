"""Topic identity (adapter): Kafka's topic IDs, which change when a topic is deleted and
created again under the same name (G10)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException, TopicCollection

from ferry.kafka.admin import Admin


def topic_ids(admin: Admin, names: Iterable[str]) -> dict[str, str]:
    """name -> topic ID (text) of each existing topic among `names` (missing ones are left
    out)."""
    names = sorted(set(names))
    if not names:
        return {}
    futures = admin.raw.describe_topics(TopicCollection(names), request_timeout=admin.timeout)
    found: dict[str, str] = {}
    for name, future in futures.items():
        try:
            found[name] = str(future.result(timeout=admin.timeout).topic_id)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                   KafkaError._UNKNOWN_TOPIC):
                continue
            raise admin.error(exc, f"describing topic {name}", f"DESCRIBE on TOPIC {name}") \
                from None
    return found

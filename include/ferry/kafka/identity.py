"""Topic identity (adapter): Kafka's topic IDs, which change when a topic is deleted and
created again under the same name (G10)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import TopicCollection

from ferry.kafka.admin import Admin


def topic_ids(admin: Admin, names: Iterable[str]) -> dict[str, str]:
    """name -> topic ID (text) of each existing topic among `names`."""
    names = sorted(set(names))
    if not names:
        return {}
    futures = admin.raw.describe_topics(TopicCollection(names), request_timeout=admin.timeout)
    return {name: str(admin.wait(future, f"describing topic {name}",
                                 f"DESCRIBE on TOPIC {name}").topic_id)
            for name, future in futures.items()}

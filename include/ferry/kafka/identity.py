"""Topic identity (adapter): Kafka's topic IDs, which change when a topic is deleted and
created again under the same name (G10)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException, TopicCollection

from ferry.kafka.admin import Admin

_MISSING = "missing"
_UNKNOWN = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)


def topic_ids(admin: Admin, names: Iterable[str]) -> dict[str, str]:
    """name -> topic ID (text) of each existing topic among `names` (missing ones are left
    out; one this Admin has just created is waited for). Transient broker states are
    waited out within the client's retry budget."""
    wanted = sorted(set(names))
    if not wanted:
        return {}

    def missing(name: str, exc: KafkaException) -> str | None:
        if not (exc.args and exc.args[0].code() in _UNKNOWN):
            return None
        return None if admin.just_created(name) else _MISSING

    found = admin.batch(
        {name: name for name in wanted},
        lambda todo, timeout: admin.raw.describe_topics(TopicCollection(todo),
                                                        request_timeout=timeout),
        lambda name: (f"describing topic {name}", f"DESCRIBE on TOPIC {name}"),
        handle=missing)
    return {name: str(d.topic_id) for name, d in found.items() if d != _MISSING}

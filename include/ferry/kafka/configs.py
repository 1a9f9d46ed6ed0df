"""Read and change topic configs (adapter for `ferry.core.sync.configs`)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from ferry.core.sync.configs import AlterTopicConfig, ConfigValue, ReplaceTopicConfig, TopicConfig
from ferry.kafka.admin import Admin

log = logging.getLogger(__name__)

_SOURCES = {s.value: s.name for s in ConfigSource}


def _source_name(source: object) -> str:
    name = getattr(source, "name", None)  # an enum in some versions, an int in others
    return str(name) if name else _SOURCES.get(source, "UNKNOWN_CONFIG")  # type: ignore[call-overload]


class IncrementalUnsupported(Exception):
    """The cluster does not implement IncrementalAlterConfigs (Event Hubs-like)."""


_MISSING = "missing"


def describe_topic_configs(admin: Admin, topics: Iterable[str], *, missing_ok: bool = False
                           ) -> dict[str, TopicConfig]:
    """Every config entry of each topic, with where its value comes from. With
    `missing_ok`, a topic that does not exist is left out instead of failing the call."""
    names = sorted(set(topics))
    if not names:
        return {}

    def missing(_topic: str, exc: KafkaException) -> str | None:
        err = exc.args[0] if exc.args else None
        return _MISSING if missing_ok and isinstance(err, KafkaError) and err.code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC) else None

    found = admin.batch(
        {t: ConfigResource(ConfigResource.Type.TOPIC, t) for t in names},
        lambda todo, timeout: admin.raw.describe_configs(todo, request_timeout=timeout),
        lambda topic: (f"describing configs of topic {topic}",
                       f"DESCRIBE_CONFIGS on TOPIC {topic}"),
        key=lambda resource: str(resource.name), handle=missing)
    return {topic: {name: ConfigValue(entry.value, _source_name(entry.source),
                                      bool(entry.is_read_only), bool(entry.is_sensitive))
                    for name, entry in found[topic].items()}
            for topic in names if found[topic] is not _MISSING}


def _unsupported(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() in (
        KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION,
        KafkaError.INVALID_REQUEST)


def alter_incremental(admin: Admin, changes: Iterable[AlterTopicConfig]) -> None:
    """Apply SET/DELETE changes with IncrementalAlterConfigs, all topics in one request.

    Raises IncrementalUnsupported when the cluster lacks the API (nothing was changed).
    """
    resources = []
    for change in changes:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in change.set]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in change.delete]
        resources.append(ConfigResource(ConfigResource.Type.TOPIC, change.topic,
                                        incremental_configs=entries))
    if not resources:
        return
    admin.settle({r.name: r for r in resources},
                 lambda todo, timeout: admin.raw.incremental_alter_configs(
                     todo, request_timeout=timeout),
                 lambda topic: (f"altering configs of remote topic {topic}",
                                f"ALTER_CONFIGS on TOPIC {topic}"),
                 lambda exc: IncrementalUnsupported(str(exc)) if _unsupported(exc) else None,
                 key=lambda resource: str(resource.name))


def alter_legacy(admin: Admin, replacements: Iterable[ReplaceTopicConfig]) -> None:
    """Replace whole topic configs with the deprecated AlterConfigs (one request)."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, r.topic,
                                set_config=dict(r.configs)) for r in replacements]
    if not resources:
        return

    def issue(todo: list[ConfigResource], timeout: float) -> dict[ConfigResource, Any]:
        with warnings.catch_warnings():  # deprecated, and chosen on purpose (MM2's modes)
            warnings.simplefilter("ignore", DeprecationWarning)
            return dict(admin.raw.alter_configs(todo, request_timeout=timeout))

    admin.settle({r.name: r for r in resources}, issue,
                 lambda topic: (f"replacing configs of remote topic {topic}",
                                f"ALTER_CONFIGS on TOPIC {topic}"),
                 key=lambda resource: str(resource.name))

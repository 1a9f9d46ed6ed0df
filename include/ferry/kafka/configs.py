"""Read and change topic configs (adapter for `ferry.sync.configs`)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from ferry.kafka.admin import Admin
from ferry.sync.configs import AlterTopicConfig, ConfigValue, ReplaceTopicConfig, TopicConfig

log = logging.getLogger(__name__)

_SOURCES = {s.value: s.name for s in ConfigSource}


def _source_name(source: object) -> str:
    name = getattr(source, "name", None)  # an enum in some versions, an int in others
    return str(name) if name else _SOURCES.get(source, "UNKNOWN_CONFIG")  # type: ignore[call-overload]


class IncrementalUnsupported(Exception):
    """The cluster does not implement IncrementalAlterConfigs (Event Hubs-like)."""


def describe_topic_configs(admin: Admin, topics: Iterable[str]) -> dict[str, TopicConfig]:
    """Every config entry of each topic, with where its value comes from."""
    names = sorted(set(topics))
    if not names:
        return {}
    futures = admin.raw.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, t) for t in names],
        request_timeout=admin.timeout)
    result: dict[str, TopicConfig] = {}
    for resource, future in futures.items():
        entries = admin.wait(future, f"describing configs of topic {resource.name}",
                             f"DESCRIBE_CONFIGS on TOPIC {resource.name}")
        result[resource.name] = {
            name: ConfigValue(entry.value, _source_name(entry.source),
                              bool(entry.is_read_only), bool(entry.is_sensitive))
            for name, entry in entries.items()}
    return result


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
    admin.settle(admin.raw.incremental_alter_configs(resources, request_timeout=admin.timeout),
                 lambda r: (f"altering configs of remote topic {r.name}",
                            f"ALTER_CONFIGS on TOPIC {r.name}"),
                 lambda exc: IncrementalUnsupported(str(exc)) if _unsupported(exc) else None)


def alter_legacy(admin: Admin, replacements: Iterable[ReplaceTopicConfig]) -> None:
    """Replace whole topic configs with the deprecated AlterConfigs (one request)."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, r.topic,
                                set_config=dict(r.configs)) for r in replacements]
    if not resources:
        return
    with warnings.catch_warnings():  # deprecated, and chosen on purpose (MM2's modes)
        warnings.simplefilter("ignore", DeprecationWarning)
        futures = admin.raw.alter_configs(resources, request_timeout=admin.timeout)
    admin.settle(futures,
                 lambda r: (f"replacing configs of remote topic {r.name}",
                            f"ALTER_CONFIGS on TOPIC {r.name}"))

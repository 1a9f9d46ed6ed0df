"""Topic-config sync: what to set or delete on remote topics so they follow the source.

MM2's rules (`MirrorSourceConnector.targetConfig` / `syncTopicConfigs`, 3.9):

- An entry is kept when it is not read-only, not sensitive, not a static broker config,
  passes `config.properties.exclude`, and (for creation and the legacy API) is not a
  default unless `use.defaults.from=source`.
- IncrementalAlterConfigs: a source default with `use.defaults.from=target` becomes a
  DELETE (the target falls back to its own default); every other kept entry a SET. Keys
  that are not kept are never touched, so target overrides of excluded keys survive.
- The legacy AlterConfigs replaces a topic's whole config. MM2 thereby drops target
  overrides of excluded keys; Ferry carries them over into the replacement so they
  survive here too.

Ferry lists only real changes: a SET whose value the target already holds as a topic
override, or a DELETE of a key the target does not override, is left out. The result is
the same as MM2's; the dry run stays readable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ferry.config import Flow

DEFAULT = "DEFAULT_CONFIG"
TOPIC_OVERRIDE = "DYNAMIC_TOPIC_CONFIG"
STATIC_BROKER = "STATIC_BROKER_CONFIG"


@dataclass(frozen=True)
class ConfigValue:
    """One entry of a topic's described config; `source` is Kafka's ConfigSource name."""

    value: str | None
    source: str = TOPIC_OVERRIDE
    read_only: bool = False
    sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT


TopicConfig = Mapping[str, ConfigValue]


def time_retention_seconds(config: TopicConfig) -> float | None:
    """How long the topic keeps a record, by time (`retention.ms`): None when records are
    kept for ever (-1), only compacted (`cleanup.policy=compact`), or the value is unknown.
    A record is deleted no sooner than this after its timestamp (a whole segment goes at
    once, so usually later)."""
    policy = config.get("cleanup.policy")
    if policy is not None and "delete" not in str(policy.value or "").split(","):
        return None
    entry = config.get("retention.ms")
    try:
        ms = int(entry.value) if entry is not None and entry.value is not None else -1
    except ValueError:
        return None
    return ms / 1000 if ms >= 0 else None


@dataclass(frozen=True)
class AlterTopicConfig:
    """Incremental changes to one remote topic."""

    topic: str
    source_topic: str
    set: tuple[tuple[str, str], ...] = ()
    delete: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReplaceTopicConfig:
    """The legacy API's whole new config for one remote topic, and what changes."""

    topic: str
    source_topic: str
    configs: tuple[tuple[str, str], ...]
    changed: tuple[str, ...]


def _kept(flow: Flow, key: str, entry: ConfigValue, incremental: bool) -> bool:
    wanted = incremental or not entry.is_default or flow.use_defaults_from == "source"
    return (wanted and not entry.read_only and not entry.sensitive
            and entry.source != STATIC_BROKER and entry.value is not None
            and flow.config_properties.accepts(key))


def creation_configs(flow: Flow, source: TopicConfig) -> dict[str, str]:
    """The configs a new remote topic is created with (MM2 `targetConfig`, not
    incremental): the source's non-default entries (all entries with
    `use.defaults.from=source`) that pass `config.properties.exclude`."""
    return {k: str(e.value) for k, e in sorted(source.items()) if _kept(flow, k, e, False)}


def diff_incremental(flow: Flow, source: Mapping[str, TopicConfig],
                     target: Mapping[str, TopicConfig]) -> tuple[AlterTopicConfig, ...]:
    """IncrementalAlterConfigs changes for every mirrored topic whose remote topic exists.

    `source` is keyed by source topic, `target` by remote topic name.
    """
    result: list[AlterTopicConfig] = []
    for name in sorted(source):
        remote = flow.remote_topic(name)
        if remote not in target:
            continue
        have = target[remote]
        sets: list[tuple[str, str]] = []
        deletes: list[str] = []
        for key, entry in sorted(source[name].items()):
            if not _kept(flow, key, entry, True):
                continue
            current = have.get(key)
            overridden = current is not None and current.source == TOPIC_OVERRIDE
            if entry.is_default and flow.use_defaults_from == "target":
                if overridden:
                    deletes.append(key)
            elif not (overridden and current is not None and current.value == entry.value):
                sets.append((key, str(entry.value)))
        if sets or deletes:
            result.append(AlterTopicConfig(remote, name, tuple(sets), tuple(deletes)))
    return tuple(result)


def diff_legacy(flow: Flow, source: Mapping[str, TopicConfig],
                target: Mapping[str, TopicConfig]) -> tuple[ReplaceTopicConfig, ...]:
    """Whole-config replacements (legacy AlterConfigs) for remote topics that differ.

    The replacement holds the kept source entries plus the target's own overrides of keys
    the filter excludes (so they survive the full replace).
    """
    result: list[ReplaceTopicConfig] = []
    for name in sorted(source):
        remote = flow.remote_topic(name)
        if remote not in target:
            continue
        have = {k: str(e.value) for k, e in target[remote].items()
                if e.source == TOPIC_OVERRIDE and e.value is not None}
        wanted = creation_configs(flow, source[name])
        wanted.update({k: v for k, v in have.items() if not flow.config_properties.accepts(k)})
        changed = sorted(k for k in set(have) | set(wanted) if have.get(k) != wanted.get(k))
        if changed:
            result.append(ReplaceTopicConfig(remote, name, tuple(sorted(wanted.items())),
                                             tuple(changed)))
    return tuple(result)


def first_api(mode: str) -> str:
    """The API tried first for `use.incremental.alter.configs=mode`."""
    return "legacy" if mode == "never" else "incremental"


def fallback_api(mode: str) -> str | None:
    """The API to use once the target refused IncrementalAlterConfigs as unsupported:
    `legacy` for `requested` (MM2 3.5-3.9), None when the mode forbids it (`required`)."""
    return "legacy" if mode == "requested" else None

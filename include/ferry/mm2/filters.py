"""Topic, group and config-property filters with MM2's semantics.

A list value is split on commas (spaces around them trimmed), the parts are joined with
`|`, and the result must match the *whole* name (Java `matches()`). An empty list matches
nothing. A name passes when it matches the include list and not the exclude list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

DEFAULT_TOPICS: Final = ".*"
DEFAULT_TOPICS_EXCLUDE: Final = r".*[\-\.]internal, .*\.replica, __.*"
DEFAULT_GROUPS: Final = ".*"
DEFAULT_GROUPS_EXCLUDE: Final = r"console-consumer-.*, connect-.*, __.*"
DEFAULT_CONFIG_PROPERTIES_EXCLUDE: Final = (
    r"follower\.replication\.throttled\.replicas, "
    r"leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, "
    r"message\.timestamp\.type, "
    r"unclean\.leader\.election\.enable, "
    r"min\.insync\.replicas"
)

_NOTHING: Final = re.compile(r"(?!)")


def split_list(value: str) -> list[str]:
    """Split a Kafka LIST value: `a, b` -> ['a', 'b']; blank -> []."""
    trimmed = value.strip()
    if not trimmed:
        return []
    return re.split(r"\s*,\s*", trimmed)


def compile_pattern_list(value: str) -> re.Pattern[str]:
    """Compile a LIST of regexes into one pattern, as MM2's `compilePatternList` does.

    Raises `re.error` for an invalid regex (the config layer reports it with its key).
    """
    parts = split_list(value)
    if not parts:
        return _NOTHING
    for part in parts:
        re.compile(part)  # name the offending part in the error, not the joined pattern
    return re.compile("|".join(parts))


@dataclass(frozen=True)
class NameFilter:
    """Include/exclude lists over names (topics or groups)."""

    include: str
    exclude: str
    _include: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _exclude: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_include", compile_pattern_list(self.include))
        object.__setattr__(self, "_exclude", compile_pattern_list(self.exclude))

    def accepts(self, name: str) -> bool:
        return bool(self._include.fullmatch(name)) and not self._exclude.fullmatch(name)


@dataclass(frozen=True)
class ConfigPropertyFilter:
    """Which topic config keys are copied to remote topics (`config.properties.exclude`)."""

    exclude: str = DEFAULT_CONFIG_PROPERTIES_EXCLUDE
    _exclude: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_exclude", compile_pattern_list(self.exclude))

    def accepts(self, config_name: str) -> bool:
        return not self._exclude.fullmatch(config_name)


def topic_filter(
    include: str = DEFAULT_TOPICS, exclude: str = DEFAULT_TOPICS_EXCLUDE
) -> NameFilter:
    return NameFilter(include, exclude)


def group_filter(
    include: str = DEFAULT_GROUPS, exclude: str = DEFAULT_GROUPS_EXCLUDE
) -> NameFilter:
    return NameFilter(include, exclude)

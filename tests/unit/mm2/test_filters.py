"""Topic, group and config-property filters: MM2's defaults and full-match semantics."""

from __future__ import annotations

import re

import pytest

from ferry.mm2.filters import (
    ConfigPropertyFilter,
    NameFilter,
    compile_pattern_list,
    group_filter,
    split_list,
    topic_filter,
)


@pytest.mark.parametrize(
    ("topic", "accepted"),
    [("topic1", True), ("heartbeats", True), ("__consumer_offsets", False),
     ("mm2-offsets.A.internal", False), ("connect-status-internal", False),
     ("foo.replica", False), ("foo.replicas", True), ("A.checkpoints.internal", False)],
)
def test_default_topic_filter(topic: str, accepted: bool) -> None:
    assert topic_filter().accepts(topic) is accepted


@pytest.mark.parametrize(
    ("group", "accepted"),
    [("group1", True), ("console-consumer-1234", False), ("connect-sink", False),
     ("__internal", False), ("my-connect-app", True)],
)
def test_default_group_filter(group: str, accepted: bool) -> None:
    assert group_filter().accepts(group) is accepted


@pytest.mark.parametrize(
    ("include", "exclude", "name", "accepted"),
    [("orders", "", "orders", True),
     ("orders", "", "orders-v2", False),  # whole-name match, not search
     ("orders.*, payments", "", "payments", True),
     ("orders.*, payments", "", "payments2", False),
     ("orders.*", "orders\\.test.*", "orders.test1", False),
     ("", "", "anything", False),  # an empty list matches nothing
     (".*", "", "", True),
     ("a|b", "", "b", True)],
)
def test_lists_are_comma_separated_full_match_regexes(
    include: str, exclude: str, name: str, accepted: bool
) -> None:
    assert NameFilter(include, exclude).accepts(name) is accepted


@pytest.mark.parametrize(
    ("prop", "copied"),
    [("retention.ms", True), ("cleanup.policy", True), ("min.insync.replicas", False),
     ("message.timestamp.type", False), ("unclean.leader.election.enable", False),
     ("leader.replication.throttled.replicas", False),
     ("follower.replication.throttled.replicas", False),
     ("message.timestamp.difference.max.ms", False)],
)
def test_default_config_property_filter(prop: str, copied: bool) -> None:
    assert ConfigPropertyFilter().accepts(prop) is copied


def test_split_list_trims_around_commas() -> None:
    assert split_list(" a , b,c ") == ["a", "b", "c"]
    assert split_list("   ") == []


def test_invalid_regex_raises() -> None:
    with pytest.raises(re.error):
        compile_pattern_list("ok, (broken")

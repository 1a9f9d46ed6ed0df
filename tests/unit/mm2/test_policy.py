"""Replication policies: MM2's own examples (DefaultReplicationPolicyTest, MirrorClientTest,
ReplicationPolicyTest) as tables."""

from __future__ import annotations

import pytest

from ferry.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

DEFAULT = DefaultReplicationPolicy()


@pytest.mark.parametrize(
    ("topic", "source"),
    [("a.b.c", "a"), ("t", None), ("a.", None), (".a", ""), ("us-west.topic1", "us-west"),
     ("source1.source2.topic1", "source1"), ("a..b", "a"), ("", None)],
)
def test_topic_source_splits_like_java(topic: str, source: str | None) -> None:
    assert DEFAULT.topic_source(topic) == source


@pytest.mark.parametrize(
    ("topic", "source", "upstream", "original"),
    # Java's "orders".split(Pattern.quote("")) is every character: MM2 takes the first one
    # for the source and peels one character per hop
    [("orders", "o", "rders", "s"), ("ab", "a", "b", "b"), ("a", None, None, "a"),
     ("", None, None, "")],
)
def test_an_empty_separator_splits_between_every_character_as_java_does(
    topic: str, source: str | None, upstream: str | None, original: str
) -> None:
    policy = DefaultReplicationPolicy("")
    assert policy.topic_source(topic) == source
    assert policy.upstream_topic(topic) == upstream
    assert policy.original_topic(topic) == original
    assert policy.format_remote_topic("", "orders") == "orders"
    assert policy.format_remote_topic("us", "orders") == "usorders"


@pytest.mark.parametrize(
    ("topic", "upstream"),
    [("topic1", None), ("us-west.topic1", "topic1"), ("us-east.us-west.topic1", "us-west.topic1")],
)
def test_upstream_topic_peels_one_hop(topic: str, upstream: str | None) -> None:
    assert DEFAULT.upstream_topic(topic) == upstream


@pytest.mark.parametrize(
    ("topic", "original"),
    [("topic1", "topic1"), ("us-west.topic1", "topic1"), ("a.b.c.topic1", "topic1")],
)
def test_original_topic_peels_every_hop(topic: str, original: str) -> None:
    assert DEFAULT.original_topic(topic) == original


def test_format_remote_topic_prefixes_the_source_alias() -> None:
    assert DEFAULT.format_remote_topic("us-west", "orders") == "us-west.orders"
    assert DefaultReplicationPolicy("__").format_remote_topic("a", "t") == "a__t"


@pytest.mark.parametrize(
    ("topic", "expected"),
    [("heartbeats", True), ("source1.heartbeats", True), ("source2.source1.heartbeats", True),
     ("heartbeats!", False), ("!heartbeats", False), ("source1heartbeats", False),
     ("source1-heartbeats", False)],
)
def test_is_heartbeats_topic(topic: str, expected: bool) -> None:
    assert DEFAULT.is_heartbeats_topic(topic) is expected


@pytest.mark.parametrize(
    ("topic", "expected"),
    [("source1.checkpoints.internal", True), ("checkpoints.internal", False),
     ("checkpoints-internal", False), ("checkpoints.internal!", False),
     ("!checkpoints.internal", False), ("source1checkpointsinternal", False)],
)
def test_is_checkpoints_topic(topic: str, expected: bool) -> None:
    assert DEFAULT.is_checkpoints_topic(topic) is expected


@pytest.mark.parametrize(
    ("topic", "internal"),
    [("__consumer_offsets", True), (".hidden", True), ("mm2-offsets.A.internal", True),
     ("connect-configs-internal", True), ("A.checkpoints.internal", True),
     ("mm2-offset-syncs.B.internal", True), ("orders", False), ("orders.internalx", False),
     ("heartbeats", False)],
)
def test_internal_topics_are_recognised(topic: str, internal: bool) -> None:
    assert DEFAULT.is_internal_topic(topic) is internal


@pytest.mark.parametrize(
    ("separator", "enabled", "syncs", "checkpoints"),
    [(".", True, "mm2-offset-syncs.primary.internal", "primary.checkpoints.internal"),
     ("__", True, "mm2-offset-syncs__primary__internal", "primary__checkpoints__internal"),
     ("__", False, "mm2-offset-syncs.primary.internal", "primary.checkpoints.internal")],
    ids=["default", "custom-separator", "custom-separator-internal-disabled"],
)
def test_internal_topic_names_follow_the_internal_separator(
    separator: str, enabled: bool, syncs: str, checkpoints: str
) -> None:
    policy = DefaultReplicationPolicy(separator, enabled)
    assert policy.offset_syncs_topic("primary") == syncs
    assert policy.checkpoints_topic("primary") == checkpoints
    assert policy.is_checkpoints_topic(checkpoints)
    assert policy.heartbeats_topic() == "heartbeats"


IDENTITY = IdentityReplicationPolicy(source_alias="primary")


@pytest.mark.parametrize(
    ("topic", "remote", "source", "upstream"),
    [("topic1", "topic1", "primary", "topic1"),
     ("heartbeats", "primary.heartbeats", None, None),
     ("primary.heartbeats", "primary.primary.heartbeats", "primary", "heartbeats"),
     ("other.topic1", "other.topic1", "primary", "other.topic1")],
)
def test_identity_policy_keeps_names_but_renames_heartbeats(
    topic: str, remote: str, source: str | None, upstream: str | None
) -> None:
    assert IDENTITY.format_remote_topic("primary", topic) == remote
    assert IDENTITY.topic_source(topic) == source
    assert IDENTITY.upstream_topic(topic) == upstream


def test_identity_policy_original_topic_stops_when_the_name_does_not_change() -> None:
    assert IDENTITY.original_topic("a.b.topic1") == "a.b.topic1"
    assert IDENTITY.original_topic("b.a.heartbeats") == "heartbeats"


def test_identity_policy_without_alias_has_no_source() -> None:
    assert IdentityReplicationPolicy().topic_source("topic1") is None

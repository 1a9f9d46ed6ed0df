"""Which topics a flow mirrors: MM2's MirrorSourceConnectorTest cases as tables."""

from __future__ import annotations

import pytest

from ferry.mm2.filters import topic_filter
from ferry.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from ferry.mm2.replication import is_cycle, should_replicate_topic

DEFAULT = DefaultReplicationPolicy()
IDENTITY = IdentityReplicationPolicy(source_alias="source")
ALL = topic_filter()


@pytest.mark.parametrize(
    ("topic", "replicated"),
    [("target.topic1", False), ("target.source.topic1", False), ("source.target.topic1", False),
     ("target.source.target.topic1", False), ("source.target.source.topic1", False),
     ("topic1", True), ("source.topic1", True), ("other.topic1", True)],
)
def test_default_policy_never_sends_a_topic_back_to_its_cluster(
    topic: str, replicated: bool
) -> None:
    assert should_replicate_topic(DEFAULT, ALL, topic, "target") is replicated


@pytest.mark.parametrize(
    ("topic", "replicated"),
    [("target.topic1", True), ("target.source.topic1", True), ("source.target.topic1", True),
     ("topic1", True), ("source.topic1", True), ("target.heartbeats", False),
     ("target.source.heartbeats", False), ("heartbeats", True), ("source.heartbeats", True)],
)
def test_identity_policy_cannot_detect_cycles_except_for_heartbeats(
    topic: str, replicated: bool
) -> None:
    assert should_replicate_topic(IDENTITY, ALL, topic, "target") is replicated


@pytest.mark.parametrize(
    ("topic", "heartbeats_replication", "replicated"),
    [("heartbeats", True, True), ("us-west.heartbeats", True, True),
     ("heartbeats", False, False), ("topic1", True, False)],
)
def test_heartbeats_are_replicated_despite_the_filter(
    topic: str, heartbeats_replication: bool, replicated: bool
) -> None:
    nothing = topic_filter(include="")
    assert should_replicate_topic(DEFAULT, nothing, topic, "target",
                                  heartbeats_replication) is replicated


@pytest.mark.parametrize(
    "topic",
    ["__consumer_offsets", "mm2-offset-syncs.target.internal", "source.checkpoints.internal",
     "connect-offsets-internal", ".hidden"],
)
def test_internal_topics_are_never_replicated(topic: str) -> None:
    assert not should_replicate_topic(DEFAULT, topic_filter(include=".*", exclude=""), topic,
                                      "target")


def test_cycle_through_a_third_cluster_is_cut() -> None:
    # A->B->C: on C, topic "B.A.x" sent towards A is a cycle; towards D it is not.
    assert is_cycle(DEFAULT, "B.A.x", "A")
    assert is_cycle(DEFAULT, "B.A.x", "B")
    assert not is_cycle(DEFAULT, "B.A.x", "D")

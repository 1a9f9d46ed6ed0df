"""Heartbeats: MM2's wire format byte for byte, and MirrorClient's topology semantics."""

from __future__ import annotations

import pytest

from ferry.core.heartbeats import (
    Heartbeat,
    decode,
    encode,
    heartbeat_topics,
    replication_hops,
    sources_of,
    upstream_clusters,
)
from ferry.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

DEFAULT = DefaultReplicationPolicy()


def test_encoding_matches_mm2_bytes_built_by_hand() -> None:
    key, value = encode(Heartbeat("edge1", "central", 1_700_000_000_123))
    assert key == b"\x00\x05edge1" + b"\x00\x07central"
    assert value == b"\x00\x00" + (1_700_000_000_123).to_bytes(8, "big")
    assert decode(key, value) == Heartbeat("edge1", "central", 1_700_000_000_123)


@pytest.mark.parametrize(("key", "value"), [(None, bytes(10)), (b"\x00\x01a", bytes(10)),
                                            (b"\x00\x01a\x00\x01b", b"\x00\x01" + bytes(8)),
                                            (b"\x00\x01a\x00\x01b", b"\x00")],
                         ids=["no-key", "one-alias", "unknown-version", "truncated"])
def test_records_that_do_not_parse_are_skipped(key: bytes | None, value: bytes) -> None:
    assert decode(key, value) is None


TOPICS = ["heartbeats", "A.heartbeats", "B.A.heartbeats", "C.heartbeats", "orders",
          "A.orders", "my-heartbeats", "A.checkpoints.internal"]


def test_heartbeat_topics_are_heartbeats_and_its_remote_copies() -> None:
    assert heartbeat_topics(DEFAULT, TOPICS) == ["A.heartbeats", "B.A.heartbeats",
                                                 "C.heartbeats", "heartbeats"]


@pytest.mark.parametrize(
    ("topic", "sources"),
    [("heartbeats", []), ("A.heartbeats", ["A"]), ("B.A.heartbeats", ["B", "A"]),
     ("A.B.A.heartbeats", ["A", "B"])],
    ids=["local", "one-hop", "two-hops", "cycle-stops"],
)
def test_sources_walk_the_chain_nearest_first(topic: str, sources: list[str]) -> None:
    assert sources_of(DEFAULT, topic) == sources


def test_upstream_clusters_and_hops_as_mirror_client() -> None:
    assert upstream_clusters(DEFAULT, TOPICS) == {"A", "B", "C"}
    assert replication_hops(DEFAULT, TOPICS, "A") == 1  # A.heartbeats beats B.A.heartbeats
    assert replication_hops(DEFAULT, TOPICS, "B") == 1
    assert replication_hops(DEFAULT, ["B.A.heartbeats"], "A") == 2
    assert replication_hops(DEFAULT, TOPICS, "Z") == -1


def test_identity_policy_names_heartbeats_like_the_default() -> None:
    identity = IdentityReplicationPolicy(source_alias="A")
    assert upstream_clusters(identity, ["heartbeats", "A.heartbeats"]) == {"A"}

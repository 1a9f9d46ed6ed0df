"""Heartbeats: one per pair with heartbeats on, written to `heartbeats` on the pair's
target; and the topology a cluster's heartbeat topics reveal (`ferry topology`)."""

from __future__ import annotations

import time

import pytest

from ferry.config import Config
from ferry.config.clients import ClientConfig
from ferry.core.heartbeats import Heartbeat, decode, encode
from ferry.errors import UsageError
from ferry.steps.heartbeats import SeenHeartbeat, emit, heartbeat_only_pairs, topology
from tests.unit.conftest import Loader
from tests.unit.steps.fakes import FakeCluster, FakeOffsetMaps, entry

CLUSTERS = """
clusters = A, B, C
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
C.bootstrap.servers = c:9092
"""


@pytest.fixture
def three(load: Loader) -> Config:
    """A->B and B->C mirror; C->A mirrors without heartbeats; every other pair only emits
    heartbeats (MM2's default, emit.heartbeats.enabled)."""
    return load(CLUSTERS + "A->B.enabled = true\nB->C.enabled = true\nC->A.enabled = true\n"
                           "C->A.emit.heartbeats.enabled = false\n")


class Clusters:
    """`connect` for `emit`: one fake per cluster, made on demand."""

    def __init__(self) -> None:
        self.made: dict[str, FakeCluster] = {}

    def __call__(self, client: ClientConfig) -> FakeCluster:
        return self.made.setdefault(client.cluster, FakeCluster(client.cluster))

    def heartbeats(self, cluster: str) -> list[Heartbeat | None]:
        return [decode(r.key, r.value) for r in self.made[cluster].read_all("heartbeats", "")]


def test_each_pair_writes_one_heartbeat_to_heartbeats_on_its_target(
    three: Config
) -> None:
    # given
    clusters = Clusters()
    before = int(time.time() * 1000)
    # when
    sent = emit([three.flow("A->B"), three.flow("B->C"), three.flow("A->C")],
                connect=clusters)
    # then
    assert [(b.source, b.target) for b in sent] == [("A", "B"), ("B", "C"), ("A", "C")]
    assert clusters.heartbeats("B") == [sent[0]]
    assert clusters.heartbeats("C") == [sent[1], sent[2]]
    assert all(before <= b.timestamp_ms <= time.time() * 1000 for b in sent)
    assert [r.timestamp_ms for r in clusters.made["C"].read_all("heartbeats", "")] == [
        b.timestamp_ms for b in sent[1:]]  # the record's time is the heartbeat's


def test_a_heartbeat_carries_the_aliases_mm2s_connectors_would(load: Loader) -> None:
    config = load(CLUSTERS + "A->B.enabled = true\nsource.cluster.alias = usdf\n"
                             "A->B.target.cluster.alias = central\n")
    clusters = Clusters()

    (sent,) = emit([config.flow("A->B")], connect=clusters)

    assert (sent.source, sent.target) == ("usdf", "central")
    assert clusters.heartbeats("B") == [sent]  # written to the pair's target cluster


def test_a_pair_with_heartbeats_off_writes_none_and_touches_no_cluster(
    three: Config
) -> None:
    clusters = Clusters()

    assert emit([three.flow("C->A")], connect=clusters) == []
    assert clusters.made == {}


def test_the_heartbeats_topic_is_created_with_its_replication_factor_setting(
    load: Loader
) -> None:
    config = load(CLUSTERS + "A->B.enabled = true\nheartbeats.topic.replication.factor = 1\n")
    clusters = Clusters()

    emit([config.flow("A->B")], connect=clusters)

    assert clusters.made["B"].ensured == [
        ("heartbeats", 1, "heartbeats.topic.replication.factor")]


def test_pairs_without_a_data_flow_that_emit_heartbeats_are_the_heartbeat_only_pairs(
    three: Config
) -> None:
    assert [f.name for f in heartbeat_only_pairs(three)] == ["A->C", "B->A", "C->B"]


def beat(cluster: FakeCluster, topic: str, source: str, target: str, at_ms: int) -> None:
    cluster.append(topic, [(*encode(Heartbeat(source, target, at_ms)), at_ms)])


def test_the_heartbeat_topics_name_the_clusters_upstream_and_their_hops(
    three: Config
) -> None:
    c = FakeCluster("C").topic("heartbeats", 2).topic("B.heartbeats", 1).topic(
        "B.A.heartbeats", 1).topic("orders", 9)

    found = topology(three, "C", client=c, entries_of=FakeOffsetMaps())

    assert found.upstream == {"B": 1, "A": 2}


def test_the_latest_heartbeat_of_each_pair_shows_its_age_and_for_a_mirrored_one_its_latency(
    three: Config
) -> None:
    # given: on C, B->C's own heartbeats, and A->B's that B->C mirrored (B.heartbeats)
    now = int(time.time() * 1000)
    c = FakeCluster("C").topic("heartbeats", 2).topic("B.heartbeats", 1)
    beat(c, "heartbeats", "B", "C", now - 20_000)
    beat(c, "heartbeats", "B", "C", now - 10_000)
    c.append("heartbeats", [(b"not a", b"heartbeat", now)])
    beat(c, "B.heartbeats", "A", "B", now - 30_000)
    # B->C committed B's heartbeats offset 0 (A->B's) at C's offset 0, 4 s after it was written
    maps = FakeOffsetMaps([entry("heartbeats", 0, (0, 1), [(0, 0, 1)], flow="B->C",
                                 target="B.heartbeats", committed_at_ms=now - 26_000)])
    # when
    found = topology(three, "C", client=c, entries_of=maps)
    # then
    assert [(h.topic, h.source, h.target, h.latency_s) for h in found.heartbeats] == [
        ("B.heartbeats", "A", "B", 4.0), ("heartbeats", "B", "C", None)]
    ages = {h.topic: h.age_s for h in found.heartbeats}
    assert ages == {"B.heartbeats": pytest.approx(30, abs=2),
                    "heartbeats": pytest.approx(10, abs=2)}
    assert maps.asked == [("B->C", frozenset({"heartbeats"}))]


def test_a_mirrored_heartbeat_the_offset_map_does_not_know_has_no_latency(
    three: Config
) -> None:
    c = FakeCluster("C").topic("B.heartbeats", 1)
    beat(c, "B.heartbeats", "A", "B", int(time.time() * 1000))

    (seen,) = topology(three, "C", client=c, entries_of=FakeOffsetMaps()).heartbeats

    assert isinstance(seen, SeenHeartbeat) and seen.latency_s is None


def test_topology_of_a_cluster_not_in_the_config_is_a_usage_error(three: Config) -> None:
    with pytest.raises(UsageError, match="no cluster 'D'"):
        topology(three, "D", client=FakeCluster("D"), entries_of=FakeOffsetMaps())

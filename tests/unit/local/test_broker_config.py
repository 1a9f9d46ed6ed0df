"""A local node's `server.properties`: one KRaft quorum of every node of the cluster, and
the replication of internal and default topics that production clusters of that size run."""

from __future__ import annotations

import pytest

from ferry.local.broker_config import server_properties
from ferry.local.layout import ClusterState, NodeState


def cluster_of(brokers: int) -> ClusterState:
    peers = tuple(NodeState(k, 9000 + 10 * k, 9001 + 10 * k) for k in range(2, brokers + 1))
    return ClusterState("source", "/clusters/source", 9010, 9011, peers=peers)


def settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@pytest.mark.parametrize(
    ("brokers", "replicas", "in_sync"),
    [(1, "1", "1"), (2, "2", "1"), (3, "3", "2"), (5, "3", "2")],
)
def test_internal_and_default_topics_are_replicated_as_the_cluster_size_allows(
    brokers: int, replicas: str, in_sync: str
) -> None:
    props = settings(server_properties(cluster_of(brokers)))

    for key in ("default.replication.factor", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor",
                "share.coordinator.state.topic.replication.factor"):
        assert props[key] == replicas, key
    for key in ("min.insync.replicas", "transaction.state.log.min.isr",
                "share.coordinator.state.topic.min.isr"):
        assert props[key] == in_sync, key


def test_every_node_votes_in_one_quorum_and_listens_on_its_own_ports() -> None:
    state = cluster_of(3)

    second = settings(server_properties(state, node_id=2))

    assert second["node.id"] == "2"
    assert second["controller.quorum.voters"] == (
        "1@127.0.0.1:9011,2@127.0.0.1:9021,3@127.0.0.1:9031")
    assert second["listeners"] == "PLAINTEXT://127.0.0.1:9020,CONTROLLER://127.0.0.1:9021"
    assert second["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9020"
    assert second["log.dirs"] == "/clusters/source/node-2/data"
    assert settings(server_properties(state))["log.dirs"] == "/clusters/source/data"
    assert state.bootstrap == "127.0.0.1:9010,127.0.0.1:9020,127.0.0.1:9030"


def test_extra_settings_win_over_the_defaults() -> None:
    props = settings(server_properties(cluster_of(3), extra={"min.insync.replicas": "1"}))

    assert props["min.insync.replicas"] == "1"


def test_a_cluster_behind_a_proxy_advertises_the_proxy_on_a_second_client_listener() -> None:
    state = ClusterState("target", "/clusters/target", 9010, 9011, proxied_port=9012,
                         proxy_port=9013)

    props = settings(server_properties(state))

    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:9010,PROXIED://127.0.0.1:9012,"
                                  "CONTROLLER://127.0.0.1:9011")
    assert props["advertised.listeners"] == ("PLAINTEXT://127.0.0.1:9010,"
                                             "PROXIED://127.0.0.1:9013")
    assert props["listener.security.protocol.map"].endswith(",PROXIED:PLAINTEXT")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert (state.bootstrap, state.proxy_bootstrap, state.proxy_upstream) == \
        ("127.0.0.1:9010", "127.0.0.1:9013", "127.0.0.1:9012")

"""Multi-cluster configs: which pairs run, which topics each flow mirrors (MM2's naming and
cycle rules), and identity-policy loops refused unless accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.config import Config, load_config
from ferry.core.sync.topics import mirrored_topics
from ferry.errors import ConfigError
from ferry.steps.heartbeats import heartbeat_only_pairs

IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "mm2.properties"
    path.write_text(text)
    return load_config(path)


def clusters(*aliases: str) -> str:
    return f"clusters = {', '.join(aliases)}\n" + "".join(
        f"{a}.bootstrap.servers = {a}:9092\n" for a in aliases)


def test_active_active_never_mirrors_a_remote_topic_back(tmp_path: Path) -> None:
    c = config(tmp_path, clusters("A", "B") + "A->B.enabled = true\nB->A.enabled = true\n")
    on_a = {"orders": 1, "B.orders": 1, "heartbeats": 1, "B.heartbeats": 1}
    on_b = {"orders": 1, "A.orders": 1, "heartbeats": 1, "A.heartbeats": 1}
    assert set(mirrored_topics(c.flow("A->B"), on_a)) == {"orders", "heartbeats"}
    assert set(mirrored_topics(c.flow("B->A"), on_b)) == {"orders", "heartbeats"}


def test_a_chain_keeps_names_and_cuts_cycles_through_a_third_cluster(tmp_path: Path) -> None:
    c = config(tmp_path, clusters("A", "B", "C") + "A->B.enabled = true\nB->C.enabled = true\n"
               "C->A.enabled = true\n")
    assert set(mirrored_topics(c.flow("B->C"), {"A.x": 1, "x": 1, "C.A.x": 1})) == {"A.x", "x"}
    assert c.flow("B->C").remote_topic("A.x") == "B.A.x"
    # C->A: B.A.x on C came from A (through B): never back to A
    assert set(mirrored_topics(c.flow("C->A"), {"B.A.x": 1, "B.x": 1})) == {"B.x"}


def test_heartbeats_run_for_pairs_without_a_data_flow(tmp_path: Path) -> None:
    c = config(tmp_path, clusters("edge1", "edge2", "central")
               + "edge1->central.enabled = true\nedge2->central.enabled = true\n")
    pairs = {f.name for f in heartbeat_only_pairs(c)}
    assert pairs == {"central->edge1", "central->edge2", "edge1->edge2", "edge2->edge1"}
    off = config(tmp_path, clusters("A", "B") + "A->B.enabled = true\n"
                 "emit.heartbeats.enabled = false\n")
    assert heartbeat_only_pairs(off) == []


def test_identity_policy_both_ways_is_refused_naming_the_fix(tmp_path: Path) -> None:
    text = clusters("A", "B") + ("A->B.enabled = true\nB->A.enabled = true\n"
                                 f"replication.policy.class = {IDENTITY}\n")
    with pytest.raises(ConfigError) as err:
        config(tmp_path, text)
    (problem,) = err.value.problems
    assert problem.key == "A->B.enabled"
    assert "ferry.identity.loops.accepted=true" in problem.line()


def test_identity_policy_both_ways_accepted_is_a_warning(tmp_path: Path) -> None:
    text = clusters("A", "B") + ("A->B.enabled = true\nB->A.enabled = true\n"
                                 f"replication.policy.class = {IDENTITY}\n"
                                 "A->B.topics = a-.*\nB->A.topics = b-.*\n"
                                 "ferry.identity.loops.accepted = true\n")
    assert any("records can loop" in w for w in config(tmp_path, text).warnings)


def test_identity_policy_one_way_migration_is_fine(tmp_path: Path) -> None:
    c = config(tmp_path, clusters("old", "new") + "old->new.enabled = true\n"
               f"replication.policy.class = {IDENTITY}\n")
    assert c.flow("old->new").remote_topic("orders") == "orders"
    assert not any("loop" in w for w in c.warnings)

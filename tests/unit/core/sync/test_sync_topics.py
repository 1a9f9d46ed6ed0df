"""Remote topic and partition diffs (MM2's rules)."""

from __future__ import annotations

from pathlib import Path

from ferry.config import Flow, load_config
from ferry.core.sync.configs import ConfigValue
from ferry.core.sync.topics import CreateTopic, GrowTopic, diff_topics, mirrored_topics


def flow(tmp_path: Path, extra: str = "") -> Flow:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                    "A->B.enabled = true\nreplication.factor = 3\n" + extra)
    return load_config(path).flow("A->B")


def test_missing_remote_topics_are_created_with_partitions_rf_and_configs(
    tmp_path: Path,
) -> None:
    actions = diff_topics(
        flow(tmp_path), {"orders": 6, "payments": 2}, {"A.payments": 2},
        {"orders": {"cleanup.policy": ConfigValue("compact"),
                    "min.insync.replicas": ConfigValue("2"),
                    "retention.ms": ConfigValue("1000"),
                    "segment.ms": ConfigValue("604800000", "DEFAULT_CONFIG")}})
    assert actions.create == (CreateTopic("A.orders", 6, 3, {"cleanup.policy": "compact",
                                                             "retention.ms": "1000"},
                                          "orders"),)
    assert actions.grow == ()


def test_grows_but_never_shrinks(tmp_path: Path) -> None:
    actions = diff_topics(flow(tmp_path), {"orders": 8, "small": 1}, {"A.orders": 4,
                                                                      "A.small": 3})
    assert actions.grow == (GrowTopic("A.orders", 4, 8, "orders"),)
    assert actions.create == ()


def test_only_mirrored_topics_count(tmp_path: Path) -> None:
    f = flow(tmp_path, "A->B.topics = orders.*\n")
    source = {"orders1": 1, "other": 1, "__consumer_offsets": 50, "B.orders2": 1,
              "heartbeats": 1, "mm2-offsets.A.internal": 25}
    assert mirrored_topics(f, source) == {"heartbeats": 1, "orders1": 1}
    assert [c.name for c in diff_topics(f, source, {}).create] == ["A.heartbeats", "A.orders1"]


def test_nothing_to_do_when_in_step(tmp_path: Path) -> None:
    assert diff_topics(flow(tmp_path), {"orders": 2}, {"A.orders": 2}).empty

"""The sync step against in-memory clusters: remote topics and partitions, topic configs and
ACLs follow the source by MM2's rules; a dry run changes nothing. The same behaviours on
secure brokers: `tests/integration/test_sync_step.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.config import Config
from ferry.core.sync.acls import Acl
from ferry.core.sync.configs import AlterTopicConfig, ConfigValue, ReplaceTopicConfig
from ferry.errors import TerminalError
from ferry.steps.sync import sync_flow
from tests.unit.conftest import Loader
from tests.unit.steps.fakes import FakeCluster

MAP_TOPIC = "ferry-offset-map.A.internal"


def acl(name: str, operation: str, principal: str = "User:alice") -> Acl:
    return Acl("TOPIC", name, "LITERAL", principal, "*", operation, "ALLOW")


def clusters() -> tuple[FakeCluster, FakeCluster]:
    """orders (3 partitions, retention.ms set on it) and payments (2) on the source; the
    target already has A.payments with 1 partition."""
    source = FakeCluster("A").topic("orders", 5, 0, 7).topic("payments", 1, 1)
    source.configs["orders"] = {"retention.ms": ConfigValue("1000")}
    target = FakeCluster("B").topic("A.payments", 1)
    return source, target


def test_a_dry_run_reports_every_change_and_changes_nothing(config: Config) -> None:
    source, target = clusters()

    report = sync_flow(config.flow("A->B"), apply=False, source=source, target=target)

    assert [(c.name, c.partitions, dict(c.configs)) for c in report.topics.create] == [
        ("A.orders", 3, {"retention.ms": "1000"})]
    assert [(g.name, g.from_partitions, g.to_partitions) for g in report.topics.grow] == [
        ("A.payments", 1, 2)]
    assert report.remote == {"A.orders": 3, "A.payments": 2}
    assert set(report.steps.values()) == {"dry run"}
    assert (target.created, target.partitions["A.payments"]) == ([], 1)


def test_a_sync_creates_remote_topics_then_the_offset_map_topic_and_grows_partitions(
    config: Config
) -> None:
    source, target = clusters()

    report = sync_flow(config.flow("A->B"), apply=True, source=source, target=target)

    assert target.created == ["A.orders", MAP_TOPIC]
    assert (target.partitions["A.orders"], target.partitions["A.payments"]) == (3, 2)
    assert target.configs["A.orders"]["retention.ms"].value == "1000"
    assert report.ready(config.flow("A->B")) == {"orders": 3, "payments": 2}
    assert report.steps == {"topics": "done", "configs": "done", "acls": "done"}


def test_a_sync_limited_to_no_steps_only_reads_both_clusters(config: Config) -> None:
    source, target = clusters()

    report = sync_flow(config.flow("A->B"), apply=True, source=source, target=target,
                       steps=())

    assert target.created == [] and report.changes == 0
    assert set(report.steps.values()) == {"not run here"}
    assert report.ready(config.flow("A->B")) == {"payments": 1}


def test_topic_configs_of_topics_on_both_sides_follow_the_source_incrementally(
    config: Config
) -> None:
    source, target = clusters()
    source.configs["payments"] = {"cleanup.policy": ConfigValue("compact")}
    target.configs["A.payments"] = {"cleanup.policy": ConfigValue("delete")}

    report = sync_flow(config.flow("A->B"), apply=True, source=source, target=target)

    # A.orders was created with its configs in this run: only A.payments is altered
    assert target.config_changes == [
        AlterTopicConfig("A.payments", "payments", (("cleanup.policy", "compact"),))]
    assert report.config_api == "incremental"
    assert target.configs["A.payments"]["cleanup.policy"].value == "compact"


@pytest.mark.parametrize(
    ("mode", "outcome"),
    [("requested", "replaced whole"), ("required", "set it to requested")],
    ids=["requested-falls-back-to-alter-configs-with-a-warning", "required-fails-naming-the-fix"],
)
def test_a_target_without_incremental_alter_configs_follows_the_mode(
    load: Loader, config: Config, mode: str, outcome: str
) -> None:
    flow = load(Path(config.path).read_text() + f"use.incremental.alter.configs = {mode}\n"
                ).flow("A->B")
    source, target = clusters()
    source.configs["payments"] = {"cleanup.policy": ConfigValue("compact")}
    target.incremental = False

    if mode == "required":
        with pytest.raises(TerminalError, match=outcome):
            sync_flow(flow, apply=True, source=source, target=target)
        return
    report = sync_flow(flow, apply=True, source=source, target=target)
    assert report.config_api == "legacy"
    assert [type(c) for c in target.config_changes] == [ReplaceTopicConfig]
    assert any(outcome in w for w in report.warnings)


def test_acls_follow_the_source_without_ever_granting_write(config: Config) -> None:
    source, target = clusters()
    source.acl_list = [acl("orders", "READ"), acl("orders", "WRITE"), acl("orders", "ALL")]

    report = sync_flow(config.flow("A->B"), apply=True, source=source, target=target)

    assert target.acl_list == [acl("A.orders", "READ")]
    assert report.acls.create == (acl("A.orders", "READ"),)


@pytest.mark.parametrize(
    ("source_acls", "target_acls", "warned"),
    [([acl("orders", "READ")], None, True), (None, None, False), (None, [], False)],
    ids=["target-without-authorizer-warns-once", "neither-has-one-quietly-skips",
         "source-without-authorizer-has-nothing-to-copy"],
)
def test_acl_sync_is_skipped_where_a_cluster_has_no_authorizer(
    config: Config, source_acls: list[Acl] | None, target_acls: list[Acl] | None,
    warned: bool
) -> None:
    source, target = clusters()
    source.acl_list, target.acl_list = source_acls, target_acls

    report = sync_flow(config.flow("A->B"), apply=True, source=source, target=target)

    assert report.steps["acls"].startswith("skipped:")
    assert any("no authorizer" in w for w in report.warnings) is warned
    assert target.created == ["A.orders", MAP_TOPIC]  # the other steps ran


@pytest.mark.parametrize(("tier", "refused"), [
    ("", ["orders (40 partitions)"]),
    ("B.ferry.eventhubs.tier = premium\n", []),
], ids=["standard-caps-at-32", "premium-takes-100"])
def test_an_event_hubs_target_refuses_topics_over_its_tiers_partitions_before_any_change(
        load: Loader, state_dir: Path, tier: str, refused: list[str]) -> None:
    config = load(f"""
clusters = A, B
A.bootstrap.servers = a:9092
B.bootstrap.servers = ns.servicebus.windows.net:9093
A->B.enabled = true
ferry.state.dir = {state_dir}
""" + tier)
    source = FakeCluster("A").topic("orders", *([0] * 40)).topic("payments", 1, 1)
    target = FakeCluster("B")
    if not refused:
        sync_flow(config.flow("A->B"), apply=True, source=source, target=target)
        assert "A.orders" in target.created
        return
    with pytest.raises(TerminalError) as raised:
        sync_flow(config.flow("A->B"), apply=True, source=source, target=target)
    assert f"takes at most 32 partitions per topic, and {refused[0]} would need more; " \
        "nothing was copied. Set B.ferry.eventhubs.tier" in str(raised.value)
    assert target.created == []

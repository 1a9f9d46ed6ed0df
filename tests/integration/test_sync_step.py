"""The sync step (mostly on secure clusters: SASL_SSL, StandardAuthorizer): remote topics and
partitions, topic configs and ACLs follow the source by MM2's rules; the mirror principal
has only the rights an operator would give it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from ferry.cli.main import main
from ferry.local.cluster import SecureClusters
from ferry.steps.sync import sync_flow
from tests.support.kafka_data import create_topic, flow_config, grow_topic, produce, read_all
from tests.support.secure_data import (
    SOURCE,
    TARGET,
    acl,
    admin,
    grant,
    grant_mirror_rights,
    secure_config,
)

pytestmark = pytest.mark.integration
DENY = AclPermissionType.DENY


def ferry(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    """Run the CLI in-process with --json: (exit code, parsed stdout, stderr)."""
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else None, out.err


def topic_configs(sc: SecureClusters, alias: str, topic: str) -> dict[str, tuple[str, bool]]:
    """name -> (value, set on the topic itself)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    client = admin(sc, alias)  # referenced until the future resolves
    entries = client.describe_configs([resource])[resource].result(timeout=30)
    return {k: (e.value, e.source == 1) for k, e in entries.items()}


def alter(sc: SecureClusters, alias: str, topic: str, set_: dict[str, str] | None = None,
          delete: tuple[str, ...] = ()) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in (set_ or {}).items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in delete]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    client = admin(sc, alias)
    client.incremental_alter_configs([resource])[resource].result(timeout=30)


def overrides(sc: SecureClusters, alias: str, topic: str) -> dict[str, str]:
    return {k: v for k, (v, own) in topic_configs(sc, alias, topic).items() if own}


def test_dry_run_lists_changes_and_changes_nothing_then_sync_creates_and_grows(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sc = secure_clusters
    create_topic(sc.client(SOURCE), topic_name, 3, {"retention.ms": "3600000"})
    config = secure_config(tmp_path, sc, f"{topic_name}.*")
    flow = config.enabled_flows[0]
    grant_mirror_rights(sc, flow, topic_name)
    remote = flow.remote_topic(topic_name)

    # without --execute a sync only shows what it would change
    code, report, _ = ferry(capsys, "sync", config.path, "--flow", flow.name)

    assert code == 0
    assert report["applied"] is False
    assert report["topics"]["create"] == [{
        "topic": remote, "source_topic": topic_name, "partitions": 3,
        "replication_factor": 1, "configs": {"retention.ms": "3600000"}}]
    assert remote not in admin(sc, TARGET).list_topics(timeout=10).topics

    code, report, _ = ferry(capsys, "sync", config.path, "--flow", flow.name, "--execute")

    assert code == 0 and report["steps"]["topics"] == "done"
    assert len(admin(sc, TARGET).list_topics(remote, timeout=10).topics[remote].partitions) == 3
    assert overrides(sc, TARGET, remote) == {"retention.ms": "3600000"}

    # More partitions and a new topic on the source: found by the next sync.
    grow_topic(sc.client(SOURCE), topic_name, 5)
    create_topic(sc.client(SOURCE), f"{topic_name}-new", 2)
    code, report, _ = ferry(capsys, "sync", config.path, "--flow", flow.name, "--execute")
    assert report["topics"]["grow"] == [{"topic": remote, "from": 3, "to": 5}]
    assert [c["topic"] for c in report["topics"]["create"]] == [f"{remote}-new"]
    topics = admin(sc, TARGET).list_topics(timeout=10).topics
    assert len(topics[remote].partitions) == 5 and len(topics[f"{remote}-new"].partitions) == 2

    code, report, _ = ferry(capsys, "sync", config.path, "--flow", flow.name, "--dry-run")
    assert report["topics"] == {"create": [], "grow": []}  # in step; never shrinks


def test_topic_configs_follow_the_source_as_in_mm2(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path
) -> None:
    sc = secure_clusters
    create_topic(sc.client(SOURCE), topic_name, 1, {
        "retention.ms": "3600000", "max.message.bytes": "200000",
        "min.insync.replicas": "1"})  # excluded by MM2's default config.properties.exclude
    flow = secure_config(tmp_path, sc, topic_name).enabled_flows[0]
    grant_mirror_rights(sc, flow, topic_name)
    remote = flow.remote_topic(topic_name)

    sync_flow(flow, apply=True)
    # Copied at creation: the non-default configs, not the excluded key.
    assert overrides(sc, TARGET, remote) == {"retention.ms": "3600000",
                                            "max.message.bytes": "200000"}

    # The target's own override of an excluded key; a source change; a source reset.
    alter(sc, TARGET, remote, {"min.insync.replicas": "1"})
    alter(sc, SOURCE, topic_name, {"retention.ms": "7200000"}, delete=("max.message.bytes",))
    report = sync_flow(flow, apply=True)

    assert report.config_api == "incremental"
    assert overrides(sc, TARGET, remote) == {"retention.ms": "7200000",  # propagated
                                            "min.insync.replicas": "1"}  # preserved
    # max.message.bytes reverted to the target's default (use.defaults.from=target)
    assert not topic_configs(sc, TARGET, remote)["max.message.bytes"][1]
    assert sync_flow(flow, apply=True).configs == ()  # in step now

    # use.defaults.from=source: a source default is written to the target.
    flow = secure_config(tmp_path, sc, topic_name,
                         f"{flow.name}.use.defaults.from = source\n").enabled_flows[0]
    alter(sc, SOURCE, topic_name, delete=("retention.ms",))
    sync_flow(flow, apply=True)
    source_default = topic_configs(sc, SOURCE, topic_name)["retention.ms"][0]
    assert overrides(sc, TARGET, remote)["retention.ms"] == source_default


def target_acls(sc: SecureClusters, name: str, kind: ResourceType = ResourceType.TOPIC
                ) -> set[tuple[str, str, str, str, str]]:
    query = AclBindingFilter(kind, name, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    client = admin(sc, TARGET)
    found = client.describe_acls(query).result(timeout=30)
    return {(b.name, b.resource_pattern_type.name, b.principal, b.operation.name,
             b.permission_type.name) for b in found}


def test_acls_follow_the_source_and_never_grant_write(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path
) -> None:
    sc = secure_clusters
    create_topic(sc.client(SOURCE), topic_name, 1)
    group = f"{topic_name}-app"
    prefixed = ResourcePatternType.PREFIXED
    grant(sc, SOURCE, [
        acl(ResourceType.TOPIC, topic_name, AclOperation.READ, "User:alice"),
        acl(ResourceType.TOPIC, topic_name, AclOperation.DESCRIBE, "User:alice"),
        acl(ResourceType.TOPIC, topic_name, AclOperation.WRITE, "User:alice"),
        acl(ResourceType.TOPIC, topic_name, AclOperation.ALL, "User:carol"),
        acl(ResourceType.TOPIC, topic_name, AclOperation.READ, "User:mallory",
            permission=DENY),
        acl(ResourceType.TOPIC, f"{topic_name}-p", AclOperation.READ, "User:alice",
            pattern=prefixed),
        acl(ResourceType.GROUP, group, AclOperation.READ, "User:alice"),
    ])
    flow = secure_config(tmp_path, sc, f"{topic_name}.*").enabled_flows[0]
    grant_mirror_rights(sc, flow, topic_name)
    remote = flow.remote_topic(topic_name)

    report = sync_flow(flow, apply=True)

    assert report.steps["acls"] == "done"
    copied = target_acls(sc, remote)
    assert not [a for a in copied if a[3] in ("WRITE", "ALL") and a[4] == "ALLOW"]
    # (User:ferry's own PREFIXED source rights were mirrored to the remote prefix too)
    assert {a for a in copied if a[1] == "LITERAL"} == {
        (remote, "LITERAL", "User:alice", "READ", "ALLOW"),
        (remote, "LITERAL", "User:alice", "DESCRIBE", "ALLOW"),
        (remote, "LITERAL", "User:carol", "READ", "ALLOW"),  # ALL becomes READ
        (remote, "LITERAL", "User:mallory", "READ", "DENY"),  # DENY kept
    }  # ALLOW WRITE never copied
    assert target_acls(sc, f"{remote}-p") == {
        (f"{remote}-p", "PREFIXED", "User:alice", "READ", "ALLOW")}
    assert target_acls(sc, group, ResourceType.GROUP) == {
        (group, "LITERAL", "User:alice", "READ", "ALLOW")}

    # The proof with real principals: records on the remote topic (written by the admin).
    produce(sc.client(TARGET), remote, [(b"k", b"v", 0)] * 3)
    alice = sc.client(TARGET, "alice", "SCRAM-SHA-512")
    assert len(read_all(alice, remote, 0, group=group)) == 3
    producer = Producer(alice | {"message.timeout.ms": 10000})
    errors: list[KafkaError | None] = []
    producer.produce(remote, b"nope", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    mallory = Consumer(sc.client(TARGET, "mallory") | {"group.id": group})
    try:
        mallory.assign([TopicPartition(remote, 0, 0)])
        deadline = time.monotonic() + 15
        denied = None
        while denied is None and time.monotonic() < deadline:
            msg = mallory.poll(1)
            if msg is not None and msg.error() is not None:
                denied = msg.error()
        assert denied is not None and denied.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)
    finally:
        mallory.close()


def test_ferry_switches_turn_prefixed_and_group_acls_off(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path
) -> None:
    sc = secure_clusters
    create_topic(sc.client(SOURCE), topic_name, 1)
    grant(sc, SOURCE, [
        acl(ResourceType.TOPIC, f"{topic_name}-q", AclOperation.READ, "User:alice",
            pattern=ResourcePatternType.PREFIXED),
        acl(ResourceType.GROUP, f"{topic_name}-g", AclOperation.READ, "User:alice"),
        acl(ResourceType.TOPIC, topic_name, AclOperation.READ, "User:alice"),
    ])
    flow = secure_config(tmp_path, sc, f"{topic_name}.*", "ferry.sync.acls.prefixed = false\n"
                         "ferry.sync.acls.groups = false\n").enabled_flows[0]
    grant_mirror_rights(sc, flow, topic_name)

    report = sync_flow(flow, apply=True)

    assert [a.name for a in report.acls.create] == [flow.remote_topic(topic_name)]
    assert target_acls(sc, f"{flow.remote_topic(topic_name)}-q") == set()
    assert target_acls(sc, f"{topic_name}-g", ResourceType.GROUP) == set()


def test_an_authorization_failure_names_principal_operation_resource_and_cluster(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sc = secure_clusters
    create_topic(sc.client(SOURCE), topic_name, 1)
    flow = secure_config(tmp_path, sc, topic_name).enabled_flows[0]
    grant_mirror_rights(sc, flow, topic_name, target=False)  # nothing on the target

    code, answer, _ = ferry(capsys, "sync", str(tmp_path / "mm2.properties"), "--flow",
                            flow.name, "--execute")

    assert code == 1
    error = answer["error"]
    remote = flow.remote_topic(topic_name)
    assert error.startswith(f"cluster {flow.target}: creating remote topic {remote} failed")
    assert f"User:ferry may not CREATE on TOPIC {remote}" in error
    assert "kafka-acls --add --allow-principal User:ferry --operation Create" in error
    assert sc.passwords["ferry"] not in error


def test_a_wrong_password_is_one_clear_error_without_the_password(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sc = secure_clusters
    config = secure_config(tmp_path, sc, topic_name, password="not-the-password-42")
    flow = config.enabled_flows[0]

    code = main(["sync", config.path, "--flow", flow.name, "--execute"])

    err = capsys.readouterr().err
    assert code == 1
    # the last line says it (librdkafka's own lines before it are log lines)
    last = err.splitlines()[-1]
    assert last.startswith(f"ferry: cluster {flow.source}: ")
    assert "the brokers refused the connection of User:ferry" in last
    assert "check the user name and password in sasl.jaas.config" in last
    assert "not-the-password-42" not in err and "Traceback" not in err


def test_acl_sync_is_skipped_with_one_warning_when_the_target_has_no_authorizer(
    secure_clusters: SecureClusters, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    sc = secure_clusters
    create_topic(sc.client(SOURCE), topic_name, 1)
    flow = secure_config(tmp_path, sc, topic_name,
                         plain_target=clusters["target"]).enabled_flows[0]
    grant_mirror_rights(sc, flow, topic_name, target=False)

    report = sync_flow(flow, apply=True)

    assert report.steps["topics"] == "done" and report.steps["configs"] == "done"
    assert report.steps["acls"] == f"skipped: {flow.target} has no authorizer"
    assert len(report.warnings) == 1 and "has no authorizer" in report.warnings[0]


def test_acl_sync_between_clusters_without_authorizers_is_quiet(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]

    report = sync_flow(flow, apply=True)

    assert report.steps["acls"] == "done" and report.acls.create == ()  # nothing to copy
    assert report.warnings == ()


def test_an_explicit_interval_is_honoured_across_runs(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    flow = flow_config(tmp_path, clusters, f"{topic_name}.*",
                       "refresh.topics.interval.seconds = 3600\n").enabled_flows[0]
    assert sync_flow(flow, apply=True).steps["topics"] == "done"
    create_topic(clusters["source"], f"{topic_name}-later", 1)

    later = sync_flow(flow, apply=True)

    assert later.steps["topics"].startswith("not due until")
    assert later.ready(flow) == {topic_name: 1}  # the new topic waits for the next refresh
    assert sync_flow(flow, apply=True, force=True).topics.create[0].source_topic == \
        f"{topic_name}-later"



def test_sync_over_sasl_plaintext_with_scram_and_plain(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path
) -> None:
    sc = secure_clusters
    create_topic(sc.client(SOURCE), topic_name, 2)
    flow = secure_config(tmp_path, sc, topic_name, tls=False).enabled_flows[0]
    assert flow.source_admin.settings["security.protocol"] == "SASL_PLAINTEXT"
    grant_mirror_rights(sc, flow, topic_name)

    report = sync_flow(flow, apply=True)

    assert [c.name for c in report.topics.create] == [flow.remote_topic(topic_name)]


def test_legacy_alter_configs_replaces_whole_configs_but_keeps_excluded_overrides(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1, {"retention.ms": "3600000"})
    flow = flow_config(tmp_path, clusters, topic_name,
                       "use.incremental.alter.configs = never\n").enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    sync_flow(flow, apply=True)
    target = AdminClient({"bootstrap.servers": clusters["target"]})
    source = AdminClient({"bootstrap.servers": clusters["source"]})

    def own(client: AdminClient, topic: str) -> dict[str, str]:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = client.describe_configs([resource])[resource].result(timeout=30)
        return {k: e.value for k, e in entries.items() if e.source == 1}

    for client, topic, entry in ((target, remote, ConfigEntry(
            "min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)),
            (source, topic_name, ConfigEntry(
                "retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET))):
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
        client.incremental_alter_configs([resource])[resource].result(timeout=30)

    report = sync_flow(flow, apply=True)

    assert report.config_api == "legacy"
    assert own(target, remote) == {"retention.ms": "7200000", "min.insync.replicas": "1"}


def test_a_principal_that_may_not_name_the_newest_run_is_told_the_grant_and_its_run_goes_on(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given: the mirror principal with the rights granted before runs named themselves
    # the flow's newest (no READ on the newest-run group)
    from ferry.core.internal import run_group
    from ferry.core.takeover import Named
    from ferry.kafka.runs import NewestRun
    from ferry.steps.plan import prepare

    sc = secure_clusters
    create_topic(sc.client(SOURCE), topic_name, 1)
    flow = secure_config(tmp_path, sc, topic_name).enabled_flows[0]
    grant_mirror_rights(sc, flow, topic_name, newest_run=False)
    prepare(flow, run_id="first")  # the remote and offset-map topics

    # when: a run names itself newest
    with NewestRun(flow) as newest:
        named = newest.name(Named("first"))
        found = newest.read()

    # then: a warning names the right and how to grant it; the run is not refused
    assert named is False and found is None
    warning = next(r.getMessage() for r in caplog.records if r.levelname == "WARNING"
                   and "newest" in r.getMessage())
    assert f"READ on GROUP {run_group(flow)}" in warning and "kafka-acls" in warning

    # and once granted as docs/sync.md says, the name is taken
    grant_mirror_rights(sc, flow, topic_name)
    with NewestRun(flow) as newest:
        assert newest.name(Named("second")) is True
        assert newest.read() == Named("second")

"""Flows between the session's secure clusters, and the rights a user would give Ferry."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from ferry.config import Config, Flow, load_config
from ferry.core.internal import offset_map_topic, positions_group, run_group
from ferry.local.cluster import SecureClusters
from tests.support import runner

SOURCE, TARGET = "ssource", "starget"
ALLOW = AclPermissionType.ALLOW


def admin(sc: SecureClusters, alias: str) -> AdminClient:
    return AdminClient(sc.client(alias))


def grant(sc: SecureClusters, alias: str, acls: list[AclBinding]) -> None:
    client = admin(sc, alias)
    for future in client.create_acls(acls, request_timeout=30).values():
        future.result(timeout=30)


def acl(kind: ResourceType, name: str, op: AclOperation, principal: str = "User:ferry",
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
        permission: AclPermissionType = ALLOW) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, "*", op, permission)


def secure_config(tmp: Path, sc: SecureClusters, topics: str, extra: str = "",
                  password: str | None = None, plain_target: str | None = None,
                  tls: bool = True) -> Config:
    """A flow from the secure source (SCRAM-SHA-512 over SASL_SSL) to the secure target
    (PLAIN over SASL_SSL) as `ferry`, its password read with `${file:...}`; aliases unique
    to the test (what a flow keeps on the target is named by them). `plain_target`: a
    PLAINTEXT cluster (no authorizer) as the target instead; without `tls` both sides use
    the SASL_PLAINTEXT listeners."""
    path = tmp / "mm2.properties"
    if path.exists():
        source = load_config(path).enabled_flows[0].source
    else:
        source = f"s{uuid.uuid4().hex[:6]}"
    target = "t" + source[1:]
    secrets = tmp / "secrets.properties"
    secrets.write_text(f"ferry.password={password or sc.passwords['ferry']}\n")
    secrets.chmod(0o600)
    ref = f"${{file:{secrets}:ferry.password}}"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    servers = sc.bootstrap if tls else sc.plaintext_bootstrap
    protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    target_settings = f"""{target}.bootstrap.servers = {servers[TARGET]}
{target}.security.protocol = {protocol}
{target}.sasl.mechanism = PLAIN
{target}.sasl.jaas.config = {plain} required username="ferry" password="{ref}";
{target}.ssl.truststore.type = PEM
{target}.ssl.truststore.location = {sc.ca}"""
    if plain_target:
        target_settings = f"{target}.bootstrap.servers = {plain_target}"
    path.write_text(f"""
clusters = {source}, {target}
config.providers = file
config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
{source}.bootstrap.servers = {servers[SOURCE]}
{source}.security.protocol = {protocol}
{source}.sasl.mechanism = SCRAM-SHA-512
{source}.sasl.jaas.config = {scram} required username="ferry" password="{ref}";
{source}.ssl.truststore.type = PEM
{source}.ssl.truststore.location = {sc.ca}
{target_settings}
{source}->{target}.enabled = true
{source}->{target}.topics = {topics}
replication.factor = 1
checkpoints.topic.replication.factor = 1
emit.heartbeats.enabled = false
ferry.state.dir = {tmp / 'state'}
""" + runner.runner_settings(extra) + extra)
    return load_config(path)


def grant_mirror_rights(sc: SecureClusters, flow: Flow, topic_prefix: str,
                        target: bool = True, newest_run: bool = True) -> None:
    """What an operator grants the mirror principal (docs/sync.md: "Rights Ferry needs");
    without `newest_run`, as granted before runs named themselves the flow's newest.

    Source: read and describe (configs too) the mirrored topics; describe the cluster's
    ACLs and Ferry's reader groups. Target: everything on the remote topics but no more,
    Ferry's offset-map topic, positions and reader groups and transactional ids, and ALTER
    on the cluster to create ACLs.
    """
    prefixed = ResourcePatternType.PREFIXED
    grant(sc, SOURCE, [
        *(acl(ResourceType.TOPIC, topic_prefix, op, pattern=prefixed)
          for op in (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)),
        acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
        acl(ResourceType.GROUP, f"{positions_group(flow)}.", AclOperation.DESCRIBE,
            pattern=prefixed),
        acl(ResourceType.GROUP, "*", AclOperation.DESCRIBE),  # committed offsets (checkpoints)
    ])
    if not target:
        return
    remote_prefix = flow.remote_topic("")
    grant(sc, TARGET, [
        *(acl(ResourceType.TOPIC, remote_prefix, op, pattern=prefixed)
          for op in (AclOperation.CREATE, AclOperation.WRITE, AclOperation.READ,
                     AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER,
                     AclOperation.ALTER_CONFIGS)),
        *(acl(ResourceType.TOPIC, offset_map_topic(flow), op)
          for op in (AclOperation.CREATE, AclOperation.WRITE, AclOperation.READ,
                     AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)),
        *(acl(ResourceType.GROUP, positions_group(flow), op)
          for op in (AclOperation.READ, AclOperation.DESCRIBE)),
        acl(ResourceType.GROUP, f"{positions_group(flow)}.", AclOperation.DESCRIBE,
            pattern=prefixed),
        # naming the flow's newest run (two runs at once: ferry.core.takeover)
        *(acl(ResourceType.GROUP, run_group(flow, role), AclOperation.READ)
          for role in ("", "backfill") if newest_run),
        # ferry.delivery=at_least_once: the writer slots' claims
        acl(ResourceType.GROUP, f"{positions_group(flow)}.claim.", AclOperation.READ,
            pattern=prefixed),
        *(acl(ResourceType.TRANSACTIONAL_ID, f"ferry.{flow.name}", op, pattern=prefixed)
          for op in (AclOperation.WRITE, AclOperation.DESCRIBE)),
        acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
        acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
    ])

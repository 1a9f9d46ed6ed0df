"""A MirrorMaker 1 setup (a Strimzi KafkaMirrorMaker resource, or MM1's command line) maps
onto one identity flow `<setup name>->target`, and `ferry validate` says what each setting
became."""

from __future__ import annotations

import pytest

from ferry.cli.render import config_json, config_text
from ferry.config.mm1 import Names
from ferry.core.internal import offset_map_topic, positions_group, transactional_id
from ferry.errors import ConfigError
from ferry.secrets import Secret
from tests.unit.conftest import Loader

V1BETA2 = """
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker
metadata: {name: legacy}
spec:
  version: 3.9.0
  replicas: 2
  consumer:
    bootstrapServers: edge-kafka-bootstrap:9093
    groupId: legacy-mirror
    numStreams: 3
    offsetCommitInterval: 60000
    tls:
      trustedCertificates:
        - {secretName: edge-ca, certificate: ca.crt}
    authentication:
      type: scram-sha-512
      username: mirror
      passwordSecret: {secretName: mirror-user, password: password}
    config:
      fetch.min.bytes: 2048
      auto.offset.reset: earliest
      client.dns.lookup: use_all_dns_ips
  producer:
    bootstrapServers: central-kafka-bootstrap:9092
    abortOnSendFailure: false
    config:
      compression.type: zstd
      acks: 1
  include: "orders.*|payments, refunds"
"""
SECRETS = {
    "secrets/edge-ca/ca.crt": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "secrets/mirror-user/password": "scram-pw",
}


def test_a_kafkamirrormaker_is_read_out_of_a_file_of_several_resources(load: Loader) -> None:
    kafka = "apiVersion: kafka.strimzi.io/v1beta2\nkind: Kafka\nmetadata: {name: central}\n"
    user = ("apiVersion: kafka.strimzi.io/v1beta2\nkind: KafkaUser\n"
            "metadata: {name: mirror}\nspec: {authentication: {type: scram-sha-512}}\n")

    config = load("---\n".join([kafka, V1BETA2.lstrip(), user]), files=SECRETS,
                  name="central.yaml")

    assert [f.name for f in config.enabled_flows] == ["legacy->target"]
    assert config.translated_from == "Strimzi KafkaMirrorMaker"


def test_a_strimzi_kafkamirrormaker_becomes_one_identity_flow(load: Loader) -> None:
    config = load(V1BETA2, files=SECRETS, name="mm1.yaml")

    assert [f.name for f in config.enabled_flows] == ["legacy->target"]
    flow = config.flow("legacy->target")
    # MM1 kept topic names; its whitelist took `|` and comma lists alike
    assert flow.remote_topic("orders") == "orders"
    assert flow.topics.include == "orders.*|payments|refunds"
    assert flow.topics.accepts("orders-eu") and flow.topics.accepts("refunds")
    assert not flow.topics.accepts("audit")
    assert flow.tasks_max == 3  # numStreams: the lanes
    assert not flow.emit_heartbeats.enabled and not flow.emit_checkpoints.enabled
    assert not flow.heartbeats_replication  # MM1 mirrored only what its whitelist named
    # MM1 never changed the target's topic configs or ACLs: neither does the flow, and
    # validate says so
    assert not flow.sync_topic_configs.enabled and not flow.sync_topic_acls.enabled
    assert ("(the Strimzi KafkaMirrorMaker)", "legacy->target behaves as MM1 did: no topic "
            "config or ACL sync, no heartbeats, no checkpoints (for MM2's, write the flow as "
            "an mm2.properties)") in config.translated
    # the source cluster's connection, from the consumer side, for every client of it
    consumer = flow.consumer.settings
    assert config.clusters["legacy"].bootstrap_servers == "edge-kafka-bootstrap:9093"
    assert consumer["security.protocol"] == "SASL_SSL"
    assert consumer["sasl.password"] == Secret("scram-pw")
    assert "BEGIN CERTIFICATE" in str(consumer["ssl.ca.pem"])
    assert flow.source_admin.settings["client.dns.lookup"] == "use_all_dns_ips"
    assert consumer["fetch.min.bytes"] == "2048"  # a consumer setting stays the consumer's
    assert "fetch.min.bytes" not in flow.source_admin.settings
    assert config.clusters["target"].bootstrap_servers == "central-kafka-bootstrap:9092"
    assert flow.producer.settings["compression.type"] == "zstd"
    assert "acks" not in flow.producer.settings  # MM1's acks=1 is not passed on


def test_validate_shows_what_each_mm1_setting_became_and_what_has_no_meaning(
    load: Loader
) -> None:
    config = load(V1BETA2, files=SECRETS, name="mm1.yaml")

    became = dict(config.translated)
    assert config.translated_from == "Strimzi KafkaMirrorMaker"
    assert became["spec.consumer.bootstrapServers"] == "legacy.bootstrap.servers"
    assert became["spec.include"] == "legacy->target.topics = orders.*|payments|refunds"
    assert became["spec.consumer.numStreams"] == "legacy->target.tasks.max = 3 (lanes)"
    assert became["spec.consumer.config.fetch.min.bytes"] == "legacy.consumer.fetch.min.bytes"
    assert became["spec.consumer.config.client.dns.lookup"] == "legacy.client.dns.lookup"
    for meaningless in ("spec.consumer.groupId", "spec.consumer.offsetCommitInterval",
                        "spec.consumer.config.auto.offset.reset",
                        "spec.producer.config.acks", "spec.producer.abortOnSendFailure",
                        "spec.replicas", "spec.version"):
        assert became[meaningless].startswith("no meaning in Ferry"), meaningless
    # abortOnSendFailure: false dropped records; Ferry never does, and says so
    assert any("abortOnSendFailure: false" in w and "never drops a record" in w
               for w in config.warnings)
    text = config_text(config)
    assert "translated from a Strimzi KafkaMirrorMaker:" in text
    assert "spec.consumer.groupId  ->  no meaning in Ferry" in text
    assert "scram-pw" not in text and "scram-pw" not in str(config_json(config))
    assert {"setting": "spec.include", "became": became["spec.include"]} in \
        config_json(config)["translated"]


def test_a_v1beta1_whitelist_is_read_like_include_and_an_unnamed_setup_is_source(
    load: Loader
) -> None:
    text = """
apiVersion: kafka.strimzi.io/v1beta1
kind: KafkaMirrorMaker
spec:
  consumer: {bootstrapServers: 'a:9092', groupId: g}
  producer: {bootstrapServers: 'b:9092'}
  whitelist: "clicks"
"""
    config = load(text, name="mm1.yaml")
    assert config.flow("source->target").topics.include == "clicks"
    assert dict(config.translated)["spec.whitelist"] == "source->target.topics = clicks"
    assert not config.warnings or all("never drops" not in w for w in config.warnings)


@pytest.mark.parametrize(
    ("spec", "message"),
    [("  producer: {bootstrapServers: 'b:1'}\n  include: x\n", "spec.consumer: missing"),
     ("  consumer: {groupId: g}\n  producer: {bootstrapServers: 'b:1'}\n  include: x\n",
      "spec.consumer.bootstrapServers: missing"),
     ("  consumer: {bootstrapServers: 'a:1'}\n  producer: {bootstrapServers: 'b:1'}\n",
      "spec.include: missing"),
     ("  consumer: {bootstrapServers: 'a:1', authentication: {type: gssapi}}\n"
      "  producer: {bootstrapServers: 'b:1'}\n  include: x\n", "unsupported authentication")],
    ids=["no-consumer", "no-bootstrap", "no-include", "unsupported-auth"],
)
def test_a_broken_kafkamirrormaker_names_the_field(load: Loader, spec: str,
                                                   message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load("kind: KafkaMirrorMaker\nspec:\n" + spec, name="mm1.yaml")


COMMAND = """#!/bin/sh
# the legacy mirror, as its unit ran it
exec /opt/kafka/bin/kafka-mirror-maker.sh \\
    --consumer.config consumer.properties \\
    --producer.config producer.properties \\
    --num.streams 2 --offset.commit.interval.ms 30000 \\
    --whitelist 'orders.*,payments' --abort.on.send.failure false
"""
CONSUMER = ("bootstrap.servers=edge:9092\ngroup.id=mm1-legacy\nsecurity.protocol=SASL_PLAINTEXT\n"
            "sasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain."
            'PlainLoginModule required username="m" password="cli-secret";\n'
            "fetch.min.bytes=1024\n")
PRODUCER = "bootstrap.servers=central:9092\nlinger.ms=20\nretries=5\n"


def test_mm1s_command_line_becomes_the_same_identity_flow(load: Loader) -> None:
    config = load(COMMAND, files={"consumer.properties": CONSUMER,
                                  "producer.properties": PRODUCER}, name="mirror.sh")

    flow = config.flow("mirror->target")
    assert flow.enabled and flow.tasks_max == 2
    assert flow.topics.include == "orders.*|payments"
    assert flow.remote_topic("payments") == "payments"
    assert config.clusters["mirror"].bootstrap_servers == "edge:9092"
    assert flow.source_admin.settings["sasl.password"] == Secret("cli-secret")
    assert flow.consumer.settings["fetch.min.bytes"] == "1024"
    assert flow.producer.settings["linger.ms"] == "20"
    assert not flow.sync_topic_configs.enabled and not flow.sync_topic_acls.enabled
    became = dict(config.translated)
    assert config.translated_from == "MirrorMaker 1 command line"
    assert became["--consumer.config consumer.properties: bootstrap.servers"] == \
        "mirror.bootstrap.servers"
    assert became["--consumer.config consumer.properties: group.id"].startswith(
        "no meaning in Ferry: MM1's consumer group")
    assert became["--producer.config producer.properties: retries"].startswith("no meaning")
    assert became["--whitelist orders.*,payments"] == "mirror->target.topics = orders.*|payments"
    assert became["--offset.commit.interval.ms 30000"].startswith("no meaning in Ferry")
    assert any("--abort.on.send.failure false" in w for w in config.warnings)
    assert "cli-secret" not in config_text(config)


@pytest.mark.parametrize(
    ("command", "files", "message"),
    [("kafka-mirror-maker.sh --consumer.config c.properties --whitelist x\n",
      {"c.properties": "bootstrap.servers=a:1\n"}, "--producer.config: missing"),
     ("kafka-mirror-maker.sh --consumer.config c.properties --producer.config p.properties\n",
      {"c.properties": "bootstrap.servers=a:1\n", "p.properties": "bootstrap.servers=b:1\n"},
      "--whitelist: missing"),
     ("kafka-mirror-maker.sh --consumer.config gone.properties --producer.config p.properties"
      " --include x\n", {"p.properties": "bootstrap.servers=b:1\n"}, "cannot read"),
     ("kafka-mirror-maker.sh --consumer.config c.properties --producer.config p.properties"
      " --include x\n", {"c.properties": "group.id=g\n",
                         "p.properties": "bootstrap.servers=b:1\n"},
      "bootstrap.servers: missing")],
    ids=["no-producer-config", "no-whitelist", "unreadable", "no-bootstrap"],
)
def test_a_broken_mm1_command_line_names_the_option(
    load: Loader, command: str, files: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(command, files=files, name="mirror.sh")


@pytest.mark.parametrize(
    ("setup", "flow"),
    [("legacy", "legacy->target"), ("edge.eu-1", "edge-eu-1->target"),
     ("mirror maker", "mirror-maker->target"), ("", "source->target"),
     ("target", "source->target"), ("..", "source->target")],
)
def test_an_mm1_setup_is_named_after_itself_so_two_into_one_target_never_share_state(
    setup: str, flow: str
) -> None:
    assert Names.of(setup).flow == flow


def test_two_mm1_command_lines_into_one_target_get_flows_and_internal_names_of_their_own(
    load: Loader
) -> None:
    files = {"consumer.properties": CONSUMER, "producer.properties": PRODUCER}
    first = load(COMMAND, files=files, name="mirror-eu.sh").enabled_flows[0]
    second = load(COMMAND, files=files, name="mirror-us.sh").enabled_flows[0]

    assert (first.name, second.name) == ("mirror-eu->target", "mirror-us->target")
    assert transactional_id(first, 0) != transactional_id(second, 0)
    assert positions_group(first) != positions_group(second)
    assert offset_map_topic(first) != offset_map_topic(second)

"""A Strimzi KafkaMirrorMaker2 resource maps onto the same model as mm2.properties."""

from __future__ import annotations

import pytest

from ferry.errors import ConfigError
from ferry.secrets import Secret
from tests.unit.conftest import Loader

RESOURCE = """
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker2
metadata: {name: m}
spec:
  connectCluster: dst
  clusters:
    - alias: src
      bootstrapServers: src-bootstrap:9093
      tls:
        trustedCertificates:
          - {secretName: src-ca, certificate: ca.crt}
      authentication:
        type: scram-sha-512
        username: mirror
        passwordSecret: {secretName: mirror, password: password}
      config:
        client.dns.lookup: use_all_dns_ips
    - alias: dst
      bootstrapServers: dst-bootstrap:9092
      authentication:
        type: plain
        username: writer
        passwordSecret: {secretName: writer, password: pw}
  mirrors:
    - sourceCluster: src
      targetCluster: dst
      topicsPattern: "orders.*|payments"
      topicsExcludePattern: "orders\\\\.tmp.*"
      groupsPattern: "billing.*"
      sourceConnector:
        tasksMax: 3
        config:
          replication.factor: 1
          sync.topic.acls.enabled: false
          replication.policy.class: org.apache.kafka.connect.mirror.IdentityReplicationPolicy
      checkpointConnector:
        config: {sync.group.offsets.enabled: true, emit.checkpoints.interval.seconds: 30}
"""
SECRETS = {
    "secrets/src-ca/ca.crt": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "secrets/mirror/password": "scram-pw",
    "secrets/writer/pw": "plain-pw",
}


def test_v1beta2_resource(load: Loader) -> None:
    config = load(RESOURCE, files=SECRETS, name="mm2.yaml")
    assert list(config.clusters) == ["src", "dst"]
    assert [f.name for f in config.flows] == ["src->dst"]  # no heartbeat connector: no pairs
    flow = config.flow("src->dst")
    assert flow.enabled and flow.tasks_max == 3 and flow.replication_factor == 1
    assert flow.topics.accepts("orders1") and not flow.topics.accepts("orders.tmp1")
    assert flow.groups.include == "billing.*"
    assert not flow.sync_topic_acls.active
    assert not flow.emit_heartbeats.enabled
    assert flow.emit_checkpoints.active and flow.emit_checkpoints.seconds == 30
    assert flow.sync_group_offsets.active
    assert flow.remote_topic("orders") == "orders"
    consumer = flow.consumer.settings
    assert consumer["security.protocol"] == "SASL_SSL"
    assert consumer["sasl.mechanism"] == "SCRAM-SHA-512"
    assert consumer["sasl.username"] == "mirror"
    assert consumer["sasl.password"] == Secret("scram-pw")
    assert "BEGIN CERTIFICATE" in str(consumer["ssl.ca.pem"])
    assert consumer["client.dns.lookup"] == "use_all_dns_ips"
    producer = flow.producer.settings
    assert producer["security.protocol"] == "SASL_PLAINTEXT"
    assert producer["sasl.password"] == Secret("plain-pw")


def test_v1_resource_with_target_and_mirror_sources(load: Loader) -> None:
    text = """
apiVersion: kafka.strimzi.io/v1
kind: KafkaMirrorMaker2
metadata: {name: m}
spec:
  target: {alias: central, bootstrapServers: central:9092}
  mirrors:
    - source: {alias: edge, bootstrapServers: edge:9092}
      topicsPattern: "sensors.*"
      sourceConnector: {}
"""
    config = load(text, name="mm2.yaml")
    assert config.flow("edge->central").enabled
    assert config.clusters["central"].bootstrap_servers == "central:9092"


def test_adopt_reads_the_connect_clusters_progress_where_strimzi_keeps_it(
        load: Loader) -> None:
    # Strimzi runs MM2's connectors on a Connect cluster: its defaults, unless the connect
    # cluster's config (v1beta2) or spec.target (v1) names them
    flow = load(RESOURCE, files=SECRETS, name="mm2.yaml").flow("src->dst")
    assert (flow.mm2_offsets_topic, flow.mm2_worker_group) == (
        "mirrormaker2-cluster-offsets", "mirrormaker2-cluster")

    named = RESOURCE.replace("      bootstrapServers: dst-bootstrap:9092\n", (
        "      bootstrapServers: dst-bootstrap:9092\n      config: {offset.storage.topic: "
        "dr-offsets, group.id: dr-workers}\n"))
    flow = load(named, files=SECRETS, name="mm2.yaml").flow("src->dst")
    assert (flow.mm2_offsets_topic, flow.mm2_worker_group) == ("dr-offsets", "dr-workers")

    v1 = load("""
apiVersion: kafka.strimzi.io/v1
kind: KafkaMirrorMaker2
metadata: {name: m}
spec:
  target: {alias: central, bootstrapServers: "central:9092", groupId: mm2-central,
           offsetStorageTopic: mm2-central-offsets}
  mirrors:
    - source: {alias: edge, bootstrapServers: "edge:9092"}
      sourceConnector: {}
""", name="mm2.yaml").flow("edge->central")
    assert (v1.mm2_offsets_topic, v1.mm2_worker_group) == (
        "mm2-central-offsets", "mm2-central")


def test_missing_secret_file_is_an_error_naming_the_secret(load: Loader) -> None:
    with pytest.raises(ConfigError) as err:
        load(RESOURCE, files={k: v for k, v in SECRETS.items() if "writer" not in k},
             name="mm2.yaml")
    assert "secrets/writer" in str(err.value)
    # named where the YAML user wrote it, not by the property it became
    assert "spec.clusters[1].authentication.passwordSecret = " in str(err.value)
    assert "dst.sasl.jaas.config" not in str(err.value)


@pytest.mark.parametrize(("before", "after", "problem"), [
    ("sync.topic.acls.enabled: false", "sync.topic.acls.enabled: maybe",
     "spec.mirrors[0].sourceConnector.config.sync.topic.acls.enabled = 'maybe': must be true "
     "or false; set spec.mirrors[0].sourceConnector.config.sync.topic.acls.enabled: true"),
    ("replication.factor: 1", "replication.factor: one",
     "spec.mirrors[0].sourceConnector.config.replication.factor = 'one': must be a whole "
     "number; e.g. spec.mirrors[0].sourceConnector.config.replication.factor: 2"),
    ("tasksMax: 3", "tasksMax: three",
     "spec.mirrors[0].sourceConnector.tasksMax = 'three': must be a whole number"),
    ("emit.checkpoints.interval.seconds: 30", "emit.checkpoints.interval.seconds: soon",
     "spec.mirrors[0].checkpointConnector.config.emit.checkpoints.interval.seconds = 'soon'"),
], ids=["boolean", "replication-factor", "tasks-max", "checkpoint-interval"])
def test_a_problem_in_a_resource_names_its_yaml_path_and_a_fix_in_yaml(
        load: Loader, before: str, after: str, problem: str) -> None:
    assert before in RESOURCE
    with pytest.raises(ConfigError) as err:
        load(RESOURCE.replace(before, after), files=SECRETS, name="mm2.yaml")
    assert problem in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [("kind: Kafka\nspec: {}\n", "not a KafkaMirrorMaker2 or KafkaMirrorMaker resource"),
     ("kind: KafkaMirrorMaker2\nspec:\n  clusters:\n    - alias: a\n  mirrors: []\n",
      "spec.clusters[0].bootstrapServers: missing"),
     ("kind: KafkaMirrorMaker2\nspec:\n  clusters:\n    - {alias: a, bootstrapServers: 'a:1',"
      " authentication: {type: gssapi}}\n  mirrors: []\n", "unsupported authentication"),
     ("kind: KafkaMirrorMaker2\nspec: [\n", "is not valid YAML")],
    ids=["wrong-kind", "missing-bootstrap", "unsupported-auth", "bad-yaml"],
)
def test_broken_resources_are_rejected(load: Loader, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load(text, name="mm2.yaml")


def test_patterns_win_over_connector_config_and_other_connectors_keep_their_clients(
    load: Loader,
) -> None:
    text = RESOURCE.replace(
        "          replication.factor: 1\n",
        "          replication.factor: 1\n          topics: '.*'\n").replace(
        "config: {sync.group.offsets.enabled: true, emit.checkpoints.interval.seconds: 30}",
        "config: {sync.group.offsets.enabled: true, consumer.isolation.level: "
        "read_uncommitted}")
    flow = load(text, files=SECRETS, name="mm2.yaml").flow("src->dst")
    assert not flow.topics.accepts("other")  # topicsPattern wins over config.topics
    assert flow.consumer.settings["isolation.level"] == "read_committed"
    assert flow.sync_group_offsets.active


@pytest.mark.parametrize(("fix", "told"), [
    ("set A->B.topics=orders", "set spec.mirrors[0].topicsPattern: orders"),
    ("e.g. A->B.topics=x, or A->B.topics.exclude=y",
     "e.g. spec.mirrors[0].topicsPattern: x, or A->B.topics.exclude=y"),
    ("remove A->B.topics", "remove spec.mirrors[0].topicsPattern"),
    ("see X->A->B.topics", "see X->A->B.topics"),
], ids=["assignment", "a-longer-key-left-alone", "the-key-alone", "inside-another-key"])
def test_a_problem_is_told_in_yaml_terms_only_for_the_key_as_a_whole_word(
        fix: str, told: str) -> None:
    from ferry.config.strimzi import yaml_terms
    from ferry.errors import Problem

    error = ConfigError([Problem("A->B.topics", "is wrong", fix, "v")], "m.yaml")

    (problem,) = yaml_terms(error, {"A->B.topics": "spec.mirrors[0].topicsPattern"}).problems

    assert (problem.key, problem.fix) == ("spec.mirrors[0].topicsPattern", told)

"""Config shapes found in real MirrorMaker deployments (Kafka's docs, Strimzi and AMQ Streams
examples, users' repositories), each read as MM2 or Strimzi reads it. The files here are
written for these tests in those shapes."""

from __future__ import annotations

import pytest

from ferry.errors import ConfigError
from tests.unit.conftest import BASE, Loader

IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


@pytest.mark.parametrize(("lines", "remote"), [
    # AMQ Streams' identity mirroring: the identity policy with an empty separator
    (f"replication.policy.class = {IDENTITY}\nreplication.policy.separator =\n", "orders"),
    # an empty separator under the default policy joins alias and topic
    ("replication.policy.separator =\n", "Aorders"),
], ids=["identity", "default"])
def test_an_empty_separator_is_taken_as_given_as_mm2_does(
    load: Loader, lines: str, remote: str
) -> None:
    config = load(BASE + lines)
    flow = config.flow("A->B")

    assert flow.policy.separator == ""
    assert flow.remote_topic("orders") == remote
    assert not [w for w in config.warnings if "separator" in str(w)]


def mirror_doc(name: str, connector: str = "{config: {replication.factor: 1}}") -> str:
    """A KafkaMirrorMaker2 resource mirroring dc1 into dc2 with `connector` as its
    sourceConnector."""
    return f"""apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker2
metadata: {{name: {name}}}
spec:
  connectCluster: dc2
  clusters:
    - {{alias: dc1, bootstrapServers: "dc1:9092"}}
    - {{alias: dc2, bootstrapServers: "dc2:9092"}}
  mirrors:
    - sourceCluster: dc1
      targetCluster: dc2
      topicsPattern: "orders"
      sourceConnector: {connector}
"""


def test_a_strimzi_resource_with_an_empty_separator_is_read(load: Loader) -> None:
    config = load(mirror_doc("amq", f'{{config: {{replication.policy.class: {IDENTITY}, '
                                    'replication.policy.separator: ""}}'), name="mm2.yaml")

    flow = config.flow("dc1->dc2")
    assert flow.policy.separator == "" and flow.remote_topic("orders") == "orders"


@pytest.mark.parametrize("key", ["key.converter", "value.converter", "header.converter",
                                 "A->B.value.converter"])
def test_a_converter_mm2_would_apply_to_records_is_refused_naming_the_key(
    load: Loader, key: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load(BASE + f"{key} = org.apache.kafka.connect.json.JsonConverter\n"
                    "value.converter.schemas.enable = false\n")

    (problem,) = refused.value.problems
    assert problem.key == key
    assert "JsonConverter" in problem.message and "byte for byte" in problem.message
    assert "ByteArrayConverter" in problem.fix


def test_mm2s_own_byte_array_converter_is_accepted(load: Loader) -> None:
    config = load(BASE + "key.converter = org.apache.kafka.connect.converters."
                         "ByteArrayConverter\nvalue.converter = org.apache.kafka.connect."
                         "converters.ByteArrayConverter\n")
    assert config.flow("A->B").enabled


KAFKA_DOC = """apiVersion: kafka.strimzi.io/v1beta2
kind: Kafka
metadata: {name: dc2}
spec: {kafka: {replicas: 3, listeners: []}}
"""
USER_DOC = """apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaUser
metadata: {name: mirror, labels: {strimzi.io/cluster: dc2}}
spec: {authentication: {type: tls}}
"""


def test_the_mirror_is_read_out_of_a_file_of_several_resources(load: Loader) -> None:
    text = "---\n".join([KAFKA_DOC, USER_DOC, mirror_doc("dr")])

    config = load(text, name="dc2.yaml")

    assert config.flow("dc1->dc2").remote_topic("orders") == "dc1.orders"


@pytest.mark.parametrize(("docs", "says"), [
    ([KAFKA_DOC, USER_DOC], "holds 2 resources (Kafka dc2, KafkaUser mirror), none a "
                            "KafkaMirrorMaker2 or KafkaMirrorMaker"),
    ([mirror_doc("one"), KAFKA_DOC, mirror_doc("two")], "holds 2 mirror resources"),
], ids=["no-mirror", "two-mirrors"])
def test_a_file_of_several_resources_without_exactly_one_mirror_is_refused_plainly(
    load: Loader, docs: list[str], says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load("---\n".join(docs), name="all.yaml")

    (problem,) = refused.value.problems
    assert says in problem.message and "not valid YAML" not in problem.message


@pytest.mark.parametrize(("lines", "remote", "checkpoints"), [
    # MM2's connectors take a top-level source.cluster.alias over the pair's source
    ("source.cluster.alias = usdf\n", "usdf.orders", "usdf.checkpoints.internal"),
    ("A->B.source.cluster.alias = usdf\n", "usdf.orders", "usdf.checkpoints.internal"),
    # the pre-identity trick: an empty alias and an empty separator keep the names
    ("source.cluster.alias =\nreplication.policy.separator =\n", "orders",
     "checkpointsinternal"),
    ("", "A.orders", "A.checkpoints.internal"),
], ids=["top-level", "per-flow", "empty-alias-and-separator", "unset"])
def test_source_cluster_alias_names_what_mm2_writes_as_mm2s_connectors_do(
    load: Loader, lines: str, remote: str, checkpoints: str
) -> None:
    from ferry.steps.checkpoints import checkpoints_topic

    flow = load(BASE + lines).flow("A->B")

    assert flow.name == "A->B"  # the pair, its clusters and its DAG stay A and B
    assert flow.remote_topic("orders") == remote
    assert checkpoints_topic(flow) == checkpoints


def test_target_cluster_alias_is_the_name_a_cycle_is_recognised_by(load: Loader) -> None:
    from ferry.core.sync.topics import mirrored_topics

    flow = load(BASE + "target.cluster.alias = central\n").flow("A->B")

    assert mirrored_topics(flow, {"orders": 1, "central.orders": 1, "B.orders": 1}) == {
        "orders": 1, "B.orders": 1}

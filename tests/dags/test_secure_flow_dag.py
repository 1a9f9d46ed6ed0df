"""A whole flow between two SASL_SSL clusters (SCRAM-SHA-512 source, PLAIN target, a
private CA, the password from `${file:...}`) through the flow's DAG; the mirror principal
holds only the rights an operator gives it; no password reaches a log, an XCom or a
rendered field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclOperation,
    ResourceType,
)

from ferry.local.cluster import SecureClusters
from tests.support.dags import run_dag, spark_connection
from tests.support.kafka_data import assert_exact, create_topic, grow_topic, produce, read_all
from tests.support.secure_data import (
    SOURCE,
    TARGET,
    acl,
    grant,
    grant_mirror_rights,
    secure_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def problems(log: str) -> str:
    return "\n".join(line for line in log.splitlines()
                     if not line.startswith("FERRY_DAG_RUN") and (
                         "ERROR" in line or "failed" in line or "Error" in line))[-8000:]


def alices_count(alice: Any, remote: str, group: str, within_s: float = 30.0) -> int:
    """The records alice reads of the remote topic's four partitions. The copy is exact
    already (`assert_exact` read it); a new client of hers may see the two partitions the
    source grew by, and their last stable offset, a moment after Ferry's clients did, so
    she reads again until she has them all or `within_s` passed."""
    import time

    deadline = time.monotonic() + within_s
    while True:
        count = sum(len(read_all(alice, remote, p, group=group)) for p in range(4))
        if count >= 450 or time.monotonic() > deadline:
            return count
        time.sleep(1)


# spark-submit: the password must not reach the copy task's rendered fields or the
# spark-submit command line either (the warm path is the next test's)
@pytest.mark.spark_submit
def test_a_flow_mirrors_between_sasl_ssl_clusters_with_least_rights_and_no_leaked_secret(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path
) -> None:
    sc = secure_clusters
    conns = {"source": sc.client(SOURCE), "target": sc.client(TARGET)}
    create_topic(conns["source"], topic_name, 2, {"retention.ms": "86400000"})
    produce(conns["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), i % 2)
                                          for i in range(400)])
    group = f"{topic_name}-readers"
    grant(sc, SOURCE, [acl(ResourceType.TOPIC, topic_name, AclOperation.READ, "User:alice"),
                       acl(ResourceType.GROUP, group, AclOperation.READ, "User:alice")])
    config = secure_config(tmp_path, sc, f"{topic_name}.*")
    flow = config.enabled_flows[0]
    grant_mirror_rights(sc, flow, topic_name)

    first = run_dag(config.path, flow.dag_id)

    assert first["state"] == "success", problems(first["log"])
    assert_exact(flow, conns, topic_name, 2)

    # Partition growth on the source: the remote topic grows before their records are copied.
    grow_topic(conns["source"], topic_name, 4)
    produce(conns["source"], topic_name, [(b"late", f"n{i}".encode(), 2 + i % 2)
                                          for i in range(50)])
    second = run_dag(config.path, flow.dag_id)
    assert second["state"] == "success", problems(second["log"])
    assert_exact(flow, conns, topic_name, 4)

    # alice may read the source topic, so she can read the remote one, and not write it.
    remote = flow.remote_topic(topic_name)
    alice = sc.client(TARGET, "alice", "SCRAM-SHA-512")
    assert alices_count(alice, remote, group) == 450
    errors: list[KafkaError | None] = []
    producer = Producer(alice | {"message.timeout.ms": 10000})
    producer.produce(remote, b"x", partition=0, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(15)
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # No password anywhere a user could look.
    for run in (first, second):
        seen = run["log"] + str(run["xcoms"]) + str(run["rendered"])
        assert run["xcoms"] and run["rendered"]
        for user, password in sc.passwords.items():
            assert password not in seen, f"{user}'s password leaked"


def test_cluster_credentials_can_come_from_airflow_connections_and_stay_masked(
    secure_clusters: SecureClusters, topic_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both clusters' client settings from Airflow connections given in the environment:
    the source's in the Kafka provider's JSON form, the target's in the URI form. The copy
    runs on the warm Connect server, which never saw those variables: its lanes read them
    from the snapshot the task left beside the plan, which is gone after the run."""
    import json
    from urllib.parse import quote

    from ferry.config import load_config
    from ferry.config.connections import SNAPSHOT_SUFFIX
    from ferry.steps.cycle import plans_dir

    sc = secure_clusters
    conns = {"source": sc.client(SOURCE), "target": sc.client(TARGET)}
    create_topic(conns["source"], topic_name, 2, {"retention.ms": "86400000"})
    produce(conns["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(300)])
    suffix = topic_name.rsplit("-", 1)[-1]
    source, target = f"s{suffix}", f"t{suffix}"
    password = sc.passwords["ferry"]
    monkeypatch.setenv(f"AIRFLOW_CONN_KAFKA_SRC_{suffix.upper()}", json.dumps({
        "conn_type": "kafka", "extra": {
            "bootstrap.servers": sc.bootstrap[SOURCE], "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ferry",
            "sasl.password": password, "ssl.ca.location": str(sc.ca)}}))
    monkeypatch.setenv(f"AIRFLOW_CONN_KAFKA_TGT_{suffix.upper()}", (
        f"kafka://ferry:{quote(password, safe='')}@{sc.bootstrap[TARGET]}/"
        f"?security.protocol=SASL_SSL&sasl.mechanism=PLAIN&ssl.ca.location={sc.ca}"))
    path = tmp_path / "mm2.properties"
    path.write_text(f"""
clusters = {source}, {target}
{source}.ferry.connection = kafka_src_{suffix}
{target}.ferry.connection = kafka_tgt_{suffix}
{source}->{target}.enabled = true
{source}->{target}.topics = {topic_name}
replication.factor = 1
checkpoints.topic.replication.factor = 1
emit.heartbeats.enabled = false
ferry.state.dir = {tmp_path / 'state'}
""")
    config = load_config(path)
    flow = config.enabled_flows[0]
    assert set(config.connections) == {f"kafka_src_{suffix}", f"kafka_tgt_{suffix}"}
    grant_mirror_rights(sc, flow, topic_name)
    conn = spark_connection()  # the session's warm Spark Connect server

    run = run_dag(str(path), flow.dag_id,
                  spark_conn=conn)

    assert run["state"] == "success", problems(run["log"])
    assert run["tasks"]["cycle"] == "success"
    assert_exact(flow, conns, topic_name, 2)
    assert not list(plans_dir(flow).glob("*" + SNAPSHOT_SUFFIX))
    seen = run["log"] + str(run["xcoms"]) + str(run["rendered"])
    assert password not in seen and quote(password, safe="") not in seen

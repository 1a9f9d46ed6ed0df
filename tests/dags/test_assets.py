"""Downstream DAGs wait on a mirror: every task that finishes a copy declares the flow's
AssetAlias and adds an Asset event per remote topic that received records, once the run
is recorded. A downstream DAG scheduled on one remote topic is queued by Airflow, and run
with dag.test() it reads what was mirrored from the event."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.dags import run_dag, spark_connection, two_partitions_of
from tests.support.kafka_data import flow_config

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
clusters = A, B
A.bootstrap.servers = a1:9092,a2:9092
B.bootstrap.servers = SASL_SSL://b1.example.com:9093, b2.example.com:9093
A->B.enabled = true
ferry.schedule = */5 * * * *
"""


@pytest.mark.parametrize(("servers", "topic", "uri"), [
    ("b1:9092", "A.orders", "kafka://b1:9092/A.orders"),
    ("b1:9092,b2:9092", "orders", "kafka://b1:9092/orders"),
    (" b1:9092 , b2:9092", "A.orders", "kafka://b1:9092/A.orders"),
    ("SASL_SSL://b1.example.com:9093", "A.orders", "kafka://b1.example.com:9093/A.orders"),
], ids=["one-server", "first-of-several", "spaces", "protocol-prefix"])
def test_a_remote_topics_asset_is_the_kafka_providers_uri_on_the_targets_first_server(
        servers: str, topic: str, uri: str) -> None:
    from ferry.airflow.assets import topic_uri

    assert topic_uri(servers, topic) == uri


def test_every_task_that_finishes_a_copy_declares_the_flows_alias(tmp_path: Path) -> None:
    from airflow.sdk import Asset, AssetAlias

    from ferry.airflow.assets import flow_alias, remote_topic_asset
    from ferry.airflow.dags import build_dags
    from ferry.config import load_config

    path = tmp_path / "mm2.properties"
    path.write_text(CONFIG)
    dag = build_dags(path=str(path))["ferry_A_to_B"]
    alias = AssetAlias("ferry_A_to_B.mirrored")
    assert {t.task_id: t.outlets for t in dag.tasks} == {
        "cycle": [alias], "copy": [], "finish": [alias]}
    path.write_text(CONFIG + "ferry.schedule = @continuous\n")
    continuous = build_dags(path=str(path))["ferry_A_to_B"]
    assert continuous.get_task("mirror_continuously").outlets == [alias]
    assert flow_alias("A_to_B", str(path)) == alias
    assert remote_topic_asset("A->B", "orders", str(path)) == Asset(
        uri="kafka://b1.example.com:9093/A.orders", group="kafka")
    assert load_config(path).flow("A->B").enabled


def test_a_downstream_dags_asset_looks_up_only_the_connection_its_target_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ferry.airflow.assets import flow_alias, remote_topic_asset

    # given: flow C->D, whose clusters' settings come from connections that do not exist
    # (yet), beside A->B, whose clusters are written in the config
    path = tmp_path / "mm2.properties"
    path.write_text(CONFIG.replace("clusters = A, B", "clusters = A, B, C, D") + """
C.ferry.connection = kafka_c
D.ferry.connection = kafka_d
C->D.enabled = true
""")
    for variable in ("AIRFLOW_CONN_KAFKA_C", "AIRFLOW_CONN_KAFKA_D"):
        monkeypatch.delenv(variable, raising=False)

    # when, then: A->B's Asset and C->D's alias need no connection, so they do not fail on it
    assert remote_topic_asset("A->B", "orders", str(path)).uri == \
        "kafka://b1.example.com:9093/A.orders"
    assert flow_alias("C->D", str(path)).name == "ferry_C_to_D.mirrored"
    # and C->D's Asset takes its target's bootstrap list from the connection, once it
    # exists, without looking up the source's (still missing)
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_D", '{"conn_type": "ferry_kafka", "host": "d1", '
                                               '"port": 9093}')
    assert remote_topic_asset("C->D", "orders", str(path)).uri == "kafka://d1:9093/C.orders"


DOWNSTREAM = '''
"""Runs when Ferry mirrored new records of one topic (the test's), and reports them."""
from airflow.sdk import DAG, get_current_context, task

from ferry.airflow.assets import remote_topic_asset

MIRRORED = remote_topic_asset({flow!r}, {topic!r})

with DAG("downstream_of_mirror", schedule=[MIRRORED], catchup=False):

    @task(inlets=[MIRRORED])
    def report() -> dict:
        latest = get_current_context()["inlet_events"][MIRRORED][-1]
        return dict(latest.extra)

    report()
'''


@pytest.mark.integration
@pytest.mark.spark
def test_a_downstream_dag_on_a_mirrored_topic_is_queued_and_reads_what_was_mirrored(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow queues only DAGs that are not paused; new ones are paused by default.
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "False")
    two_partitions_of(clusters, topic_name, 120)
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(REPO / "dags" / "ferry_flows.py", dags)
    (dags / "downstream.py").write_text(DOWNSTREAM.format(flow=flow.name, topic=topic_name))
    conn = spark_connection()  # the session's warm Spark Connect server
    home = str(tmp_path / "airflow")  # its own metadata DB: its own DAG folder

    mirrored = run_dag(config.path, flow.dag_id, spark_conn=conn, airflow_home=home,
                       dags_folder=str(dags))

    assert mirrored["state"] == "success", mirrored["log"][-4000:]
    uri = f"kafka://{clusters['target']}/{flow.remote_topic(topic_name)}"
    (event,) = mirrored["asset_events"]
    assert event["uri"] == uri
    assert event["extra"] == {"flow": flow.name, "run_id": event["extra"]["run_id"],
                              "source_topic": topic_name, "records": 120,
                              "partitions": {"0": [0, 60], "1": [0, 60]}}
    assert mirrored["queued_dags"] == ["downstream_of_mirror"]  # the scheduler starts it

    downstream = run_dag(config.path, "downstream_of_mirror", airflow_home=home,
                         dags_folder=str(dags))

    assert downstream["state"] == "success", downstream["log"][-4000:]
    assert json.loads(downstream["xcoms"]["report.return_value"]) == event["extra"]

    idle = run_dag(config.path, flow.dag_id, spark_conn=conn, airflow_home=home,
                   dags_folder=str(dags))
    assert idle["state"] == "success" and idle["asset_events"] == []

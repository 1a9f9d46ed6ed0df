"""`ferry_failover`: the failover of `ferry failover` from a trigger form, run with
dag.test() on real clusters: a dry run by default, then an executed planned failover that
catches the flow up on the warm Spark and moves the group to the target exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.dags import run_dag, spark_connection
from tests.support.failover import assert_exact_failover, commit_source
from tests.support.kafka_data import create_topic, flow_config, produce


def test_the_form_offers_each_flow_both_modes_and_a_dry_run_by_default(tmp_path: Path) -> None:
    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:9092\n"
                    "B.bootstrap.servers = b:9092\nA->B.enabled = true\nB->A.enabled = true\n"
                    "emit.heartbeats.enabled = false\n")
    dag = build_dags(path=str(path))["ferry_failover"]
    params = dag.params
    assert params.get_param("flow").schema["enum"] == ["A->B", "B->A"]
    assert params.get_param("mode").schema["enum"] == ["planned", "unplanned"]
    assert params["execute"] is False and params["deadline_seconds"] == 600
    assert [t.task_id for t in dag.tasks] == ["failover"] and dag.schedule is None


@pytest.mark.integration
@pytest.mark.spark
def test_a_planned_failover_from_the_form_moves_the_group_exactly(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2)
                                             for i in range(200)])
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: 30, 1: 80})
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    conn = spark_connection()  # the session's warm Spark Connect server
    form = {"flow": flow.name, "mode": "planned", "groups": f"{topic_name}-.*"}

    shown = run_dag(config.path, "ferry_failover", form, spark_conn=conn)

    assert shown["state"] == "success", shown["log"][-4000:]
    report = json.loads(shown["xcoms"]["failover.return_value"])
    assert report["executed"] is False and report["cycles"] == 0

    done = run_dag(config.path, "ferry_failover", form | {"execute": True}, spark_conn=conn)

    assert done["state"] == "success", done["log"][-4000:]
    report = json.loads(done["xcoms"]["failover.return_value"])
    assert report["executed"] is True and report["cycles"] >= 2
    assert sorted((g["partition"], g["outcome"]) for g in report["groups"]) == [
        (0, "committed"), (1, "committed")]
    assert "[ferry.failover]" in done["log"]
    assert_exact_failover(flow, clusters, topic_name, 2, group, {0: 30, 1: 80})

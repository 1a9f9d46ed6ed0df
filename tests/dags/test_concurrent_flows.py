"""Two flows into one target, their DAG runs at the same time (each its own Airflow
process and copy job, both on the session's warm Spark Connect server): neither run fails
on the other's Delta commits, no offset-map row is lost, both copies are exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.core.tables import StatePaths
from ferry.kafka.mapreader import read_entries
from ferry.state.reader import rows
from tests.support.dags import dag_result, start_dag
from tests.support.kafka_data import assert_exact
from tests.support.topologies import fan_in

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_two_flows_into_one_target_run_at_once_without_conflicts(
    clusters: dict[str, str], third_cluster: str, topic_name: str, tmp_path: Path
) -> None:
    config, edges, central = fan_in(clusters, third_cluster, topic_name, tmp_path, 300)
    flows = [config.flow(f"{edge}->{central}") for edge in edges]

    runs = [start_dag(config.path, flow.dag_id, airflow_home=str(tmp_path / f"airflow-{i}"))
            for i, flow in enumerate(flows)]  # both at once, each with its own metadata DB
    results = [dag_result(run, timeout=900) for run in runs]

    for result in results:
        assert result["state"] == "success", result["log"][-4000:]
        # each run's `cycle` copied and recorded through the server itself, both at once
        assert result["tasks"] == {"cycle": "success", "copy": "skipped", "finish": "skipped"}
        assert "run recorded (by its job):" in result["log"]
        # the first copies into the fresh state folder race to create its tables: the
        # loser appends to the winner's table instead of failing its task
        assert "DELTA_PROTOCOL_CHANGED" not in result["log"], result["log"][-4000:]
    state = StatePaths(config.flows[0].ferry.state_dir)
    for flow, bootstrap in zip(flows, edges.values(), strict=True):
        assert_exact(flow, {"source": bootstrap, "target": clusters["target"]}, topic_name, 2)
        committed = list(read_entries(flow))
        recorded = rows(state.offset_map, flow.name)
        assert len(recorded) == len(committed) > 0  # every entry the target holds, in Delta
        assert {r["run_id"] for r in rows(state.runs, flow.name)} == \
            {e.run_id for _, e in committed}

"""Two flows into one target, their DAG runs at the same time (each its own Airflow
process and Spark job): no Delta conflict, no lost offset-map row, both copies exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ferry.core.tables import StatePaths
from ferry.kafka.mapreader import read_entries
from ferry.state.reader import rows
from tests.support.kafka_data import assert_exact
from tests.support.topologies import fan_in

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_two_flows_into_one_target_run_at_once_without_conflicts(
    clusters: dict[str, str], third_cluster: str, topic_name: str, tmp_path: Path
) -> None:
    from ferry.airflow.testing import airflow_env

    config, edges, central = fan_in(clusters, third_cluster, topic_name, tmp_path, 300)
    flows = [config.flow(f"{edge}->{central}") for edge in edges]

    runs = [subprocess.Popen(
        [sys.executable, "-m", "ferry.airflow.testing", config.path, flow.dag_id],
        env=airflow_env(str(tmp_path / f"airflow-{i}"), config.path),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i, flow in enumerate(flows)]  # both at once, each with its own metadata DB
    outputs = [run.communicate(timeout=900)[0] for run in runs]

    for output in outputs:
        lines = [x for x in output.splitlines() if x.startswith("FERRY_DAG_RUN ")]
        assert lines, output[-3000:]
        result = json.loads(lines[-1].removeprefix("FERRY_DAG_RUN "))
        assert result["state"] == "success", output[-4000:]
        assert result["tasks"]["mirror"] == "success"
    state = StatePaths(config.flows[0].ferry.state_dir)
    for flow, bootstrap in zip(flows, edges.values(), strict=True):
        assert_exact(flow, {"source": bootstrap, "target": clusters["target"]}, topic_name, 2)
        committed = list(read_entries(flow))
        recorded = rows(state.offset_map, flow.name)
        assert len(recorded) == len(committed) > 0  # every entry the target holds, in Delta
        assert {r["run_id"] for r in rows(state.runs, flow.name)} == \
            {e.run_id for _, e in committed}

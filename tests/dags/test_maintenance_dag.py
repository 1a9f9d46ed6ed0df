"""`ferry_maintenance`: its shape, and real `dag.test()` runs (a dry run, then the real
thing) against a state directory of real Delta tables written by Spark and delta-rs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ferry.core.retention import DEFAULT_RETENTION_HOURS, SAFE_MINIMUM_RETENTION_HOURS, state_tables
from tests.support.dags import run_dag
from tests.support.maintenance import (
    FLOWS,
    files_per_flow,
    identities,
    sample_rows,
    state_config,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_one_task_per_state_table_daily_one_run_at_a_time(tmp_path: Path) -> None:
    from ferry.airflow.maintenance_dag import build_maintenance_dag

    config = state_config(tmp_path)
    dag = build_maintenance_dag(config, config.path)
    assert dag.dag_id == "ferry_maintenance"
    assert dag.timetable.expression == "0 0 * * *" and dag.catchup is False  # @daily
    assert dag.max_active_runs == 1
    assert [t.task_id for t in dag.tasks] == list(state_tables())
    assert {"offset_map", "runs", "gaps", "syncs", "checkpoints", "verify"} <= set(dag.task_ids)
    assert set(dag.tags) == {"ferry", "maintenance"}
    params = dag.params
    assert params["retention_hours"] == DEFAULT_RETENTION_HOURS
    assert params["dry_run"] is False
    retention = params.get_param("retention_hours")
    assert retention.schema["minimum"] == SAFE_MINIMUM_RETENTION_HOURS
    assert retention.description and params.get_param("dry_run").description
    state = config.enabled_flows[0].ferry.state_dir
    assert f"`{state}`" in dag.doc_md and f"ferry maintain {config.path}" in dag.doc_md


def run_maintenance(config: str, conf: dict[str, Any]) -> dict[str, Any]:
    """One `dag.test()` run of ferry_maintenance (registered beside the flows' DAGs) in a
    fresh process; the run's state, its task states and XComs."""
    return run_dag(config, "ferry_maintenance", conf)


@pytest.mark.integration
@pytest.mark.spark
def test_the_maintenance_dag_compacts_the_state_tables_of_a_config(
        spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from ferry.core.tables import RUNS_DDL, SYNCS_DDL, StatePaths
    from ferry.spark.copy_job import _append as spark_append
    from ferry.state import writer

    # given: a state dir whose runs (Spark) and syncs (delta-rs) tables have many small files
    config = state_config(tmp_path)
    paths = StatePaths(config.enabled_flows[0].ferry.state_dir)
    for n in range(10):
        spark_append(spark, sample_rows(RUNS_DDL, [f"r{n}"]), RUNS_DDL, paths.runs)
        writer.append(paths.syncs, SYNCS_DDL, sample_rows(SYNCS_DDL, [f"s{n}"]))
    written = {p: identities(p) for p in (paths.runs, paths.syncs)}
    versions = {p: DeltaTable(p).version() for p in written}

    # when: a dry run
    dry = run_maintenance(config.path, {"dry_run": True})

    # then: every table task ran, planned, changed nothing
    assert dry["state"] == "success", dry["log"][-4000:]
    assert set(dry["tasks"].values()) == {"success"}
    assert set(dry["tasks"]) == set(state_tables())
    planned = json.loads(dry["xcoms"]["runs.return_value"])
    assert planned["dry_run"] is True
    assert [c["partition"] for c in planned["tables"][0]["compacted"]] == sorted(FLOWS)
    assert {p: DeltaTable(p).version() for p in written} == versions

    # when: the scheduled run (default params)
    done = run_maintenance(config.path, {})

    # then: one file per flow partition, every row still there, the report in the XCom
    assert done["state"] == "success", done["log"][-4000:]
    for path, rows in written.items():
        assert files_per_flow(path) == Counter(dict.fromkeys(FLOWS, 1))
        assert identities(path) == rows
    report = json.loads(done["xcoms"]["runs.return_value"])
    assert report["retention_hours"] == DEFAULT_RETENTION_HOURS
    assert (report["files_before"], report["files_after"]) == (20, 2)
    assert json.loads(done["xcoms"]["gaps.return_value"])["tables"][0]["present"] is False


def test_a_retention_below_the_minimum_is_refused_before_the_run_starts(
        tmp_path: Path) -> None:
    config = state_config(tmp_path)
    from ferry.airflow.testing import airflow_env

    env = airflow_env(os.environ["AIRFLOW_HOME"], config.path)
    result = subprocess.run([sys.executable, "-m", "ferry.airflow.testing", config.path,
                             "ferry_maintenance", json.dumps({"retention_hours": 2})], env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert "FERRY_DAG_RUN" not in result.stdout
    assert "retention_hours" in result.stderr and "2 is less than the minimum of 24" in \
        result.stderr, result.stderr[-3000:]

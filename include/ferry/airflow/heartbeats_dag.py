"""`ferry_heartbeats`: heartbeats of the cluster pairs that have no data flow of their
own (MM2 emits them for every pair)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ferry.airflow.flow_dag import schedule_of
from ferry.airflow.tasks import task_config, task_edge, team_args, team_tags
from ferry.config import Config

HEARTBEATS_DAG = "ferry_heartbeats"


def heartbeat(path: str) -> list[str]:
    """Write a heartbeat for every pair that emits heartbeats but has no DAG of its own."""
    from ferry.steps.heartbeats import emit, heartbeat_only_pairs

    with task_edge():
        config = task_config(path)
        return [f"{b.source}->{b.target}" for b in emit(heartbeat_only_pairs(config))]


def build_heartbeats_dag(config: Config, path: str) -> Any:
    """Heartbeats of the pairs without a data flow (MM2 emits them for every pair while
    emit.heartbeats.enabled), so each cluster's `heartbeats` topic has something to mirror."""
    from airflow.sdk import DAG, task

    from ferry.steps.heartbeats import heartbeat_only_pairs

    pairs = heartbeat_only_pairs(config)
    with DAG(
        dag_id=HEARTBEATS_DAG,
        schedule=schedule_of(pairs[0]),
        start_date=datetime(2024, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["ferry", "heartbeats", *team_tags(pairs)],
        doc_md="### Ferry: heartbeats\n\nWrites a heartbeat for each pair without a data "
               "flow: " + ", ".join(f"`{f.name}`" for f in pairs) + ".",
        default_args={"retries": 1, "retry_delay": timedelta(seconds=30)} | team_args(pairs),
    ) as dag:
        task(task_id="heartbeat")(heartbeat)(path)
    return dag

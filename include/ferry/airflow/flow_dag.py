"""One Airflow DAG per enabled flow: heartbeat -> sync_topology -> plan -> mirror -> record
-> checkpoints; its tasks are the steps of `ferry.steps.cycle`.

- `sync_topology` keeps the target's shape in step (`ferry.steps.sync`): remote topics and
  partitions before any record of them is copied, topic configs, ACLs, each when due; it
  also creates Ferry's offset-map topic.
- `plan` reads watermarks and positions and writes the run's plan file; an idle plan
  (nothing to copy, no gap, offset map up to date) skips `mirror`: no JVM starts.
- `mirror` is the Spark provider's SparkSubmitOperator running `jobs/ferry_copy.py`
  (`spark_default` connection, `local[*]` in the embedded setup); the job copies and
  records gaps, runs and the offset map in Delta.
- `record` reads back what the run recorded (delta-rs) and logs the summary.

Parse time stays cheap: only the config file is read. Ferry errors become Airflow's
fail-without-retry at the task edge when retrying cannot help.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ferry.airflow.tasks import (
    copy_job_settings,
    file_safe,
    spark_job_files,
    spark_master,
    task_config,
    task_edge,
)
from ferry.config import Flow

if TYPE_CHECKING:
    from ferry.steps.cycle import Cycle

def schedule_of(flow: Flow) -> str | None:
    return None if flow.ferry.schedule == "none" else flow.ferry.schedule

def doc_md(flow: Flow, path: str) -> str:
    policy = flow.policy.class_name.rsplit(".", 1)[-1]
    return f"""### Ferry: {flow.source} → {flow.target}

Mirrors the topics of **{flow.source}** matching `{flow.topics.include}` (excluding
`{flow.topics.exclude}`) to **{flow.target}** in exact offset ranges, exactly once
(`ferry.delivery={flow.ferry.delivery}`). Remote topics are named by {policy}:
`orders` → `{flow.remote_topic("orders")}`.

Each run: **sync_topology** (remote topics, partitions, configs, ACLs) → **plan** (exact
ranges) →
**mirror** (Spark copy job, skipped when idle) → **record** (what Delta recorded).

Config: `{path}` · schedule `{flow.ferry.schedule}` · state `{flow.ferry.state_dir}`.
Look up a record: `ferry offsets {path} --flow '{flow.name}' --topic T --partition P
--source-offset N`.
"""

def _flow(path: str, name: str) -> Flow:
    return task_config(path).flow(name)

def _cycle(path: str, name: str) -> Cycle:
    """This DAG run's cycle (`ferry.steps.cycle`): the steps `ferry mirror` runs too, with
    the Airflow run id (made safe for file names) tagging what they record."""
    from airflow.sdk import get_current_context

    from ferry.steps.cycle import Cycle

    config = task_config(path)
    return Cycle(config, config.flow(name), file_safe(str(get_current_context()["run_id"])),
                 spark_master())

def sync_topology(path: str, name: str) -> dict[str, Any]:
    """The sync step (topics, partitions, configs, ACLs; each when due). Its XCom holds
    names and counts only, never client settings."""
    with task_edge():
        return _cycle(path, name).sync()

def plan(path: str, name: str) -> dict[str, Any]:
    """The plan step; with work, the plan file and the job's files for the copy task."""
    with task_edge():
        cycle = _cycle(path, name)
        planned = cycle.plan()
        result = planned.summary()
        if planned.plan_path is not None:
            result.update(plan_path=planned.plan_path, **spark_job_files(spark_master()))
        return result

def record(path: str, name: str, planned: dict[str, Any]) -> dict[str, Any]:
    """The record step: the run's last attempt at each range, and a lag-history point."""
    with task_edge():
        return _cycle(path, name).record(bool(planned.get("idle")))

def checkpoints(path: str, name: str) -> dict[str, Any]:
    """Translate the flow's consumer groups (every run, idle or not): checkpoints, and group
    offsets on the target with sync.group.offsets.enabled."""
    with task_edge():
        return _cycle(path, name).checkpoints()

def heartbeat(path: str, name: str | None = None) -> list[str]:
    """Write heartbeats: the flow's own pair, or (without `name`) every pair that emits
    heartbeats but has no DAG of its own."""
    from ferry.steps.heartbeats import emit, heartbeat_only_pairs

    with task_edge():
        if name:
            return _cycle(path, name).heartbeat()
        config = task_config(path)
        return [f"{b.source}->{b.target}" for b in emit(heartbeat_only_pairs(config))]

def has_work(planned: dict[str, Any]) -> bool:
    """False for an idle plan: the Spark task is skipped."""
    return not planned["idle"]

def build_dag(flow: Flow, path: str) -> Any:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG, task

    from ferry.spark.submit import job_arguments

    with DAG(
        dag_id=flow.dag_id,
        schedule=schedule_of(flow),
        start_date=datetime(2024, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["ferry", f"source:{flow.source}", f"target:{flow.target}"],
        doc_md=doc_md(flow, path),
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    ) as dag:
        beat = task(task_id="heartbeat")(heartbeat)(path, flow.name)
        topology = task(task_id="sync_topology")(sync_topology)(path, flow.name)
        planned = task(task_id="plan")(plan)(path, flow.name)
        # Only `mirror` is skipped when idle: record and checkpoints still run.
        gate: Callable[..., Any] = task.short_circuit(
            task_id="has_work", ignore_downstream_trigger_rules=False)(has_work)
        mirror = SparkSubmitOperator(
            task_id="mirror",
            application_args=job_arguments(path, flow.name,
                                           "{{ ti.xcom_pull(task_ids='plan')['plan_path'] }}"),
            name=f"ferry-copy {flow.name}",
            retries=1,
            # A hung copy must not hold the flow (max_active_runs=1) for ever; lanes also
            # fail on their own when a partition makes no progress for 120 s.
            execution_timeout=timedelta(seconds=flow.ferry.mirror_timeout_seconds),
            **copy_job_settings("plan"),
        )
        recorded = task(task_id="record", trigger_rule="none_failed")(record)(
            path, flow.name, planned)  # type: ignore[arg-type]  # an XComArg at parse time
        translated = task(task_id="checkpoints", trigger_rule="none_failed")(checkpoints)(
            path, flow.name)
        beat >> topology >> planned
        gate(planned) >> mirror >> recorded >> translated
    return dag

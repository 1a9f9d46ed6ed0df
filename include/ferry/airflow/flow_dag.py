"""One Airflow DAG per enabled flow: heartbeat -> sync_topology -> plan -> mirror -> record
-> checkpoints; its tasks are the steps of `ferry.steps.cycle`.

- `sync_topology` keeps the target's shape in step (`ferry.steps.sync`): remote topics and
  partitions before any record of them is copied, topic configs, ACLs, each when due; it
  also creates Ferry's offset-map topic.
- `plan` reads watermarks and positions and writes the run's plan file; an idle plan
  (nothing to copy, no gap, offset map up to date) skips `mirror`: no JVM starts.
- `mirror` is the Spark provider's SparkSubmitOperator running `jobs/ferry_copy.py`
  (`spark_default` connection, `local[*]` in the embedded setup); the job copies and
  records gaps, runs and the offset map in Delta. When the master is a Spark Connect
  server (a `spark_connect` connection, or `ferry.spark.master=sc://...` without one),
  `mirror_warm` runs the same job through it from the task's process instead: no JVM
  starts. `has_work` picks one of them, or none for an idle plan.
- `record` reads back what the run recorded (delta-rs) and logs the summary.

With `ferry.schedule=@continuous` the DAG is one task instead, `mirror_continuously`:
whole cycles back to back (`ferry.steps.cycle.run_continuously`, each exactly once) for
`ferry.continuous.run.seconds`, after which Airflow's continuous schedule starts the next
run at once (`max_active_runs=1`).

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

{_run_doc(flow)}

Config: `{path}` · schedule `{flow.ferry.schedule}` · state `{flow.ferry.state_dir}`.
Look up a record: `ferry offsets {path} --flow '{flow.name}' --topic T --partition P
--source-offset N`.
"""

def _run_doc(flow: Flow) -> str:
    if flow.ferry.schedule == "@continuous":
        return (f"Each run: **mirror_continuously**, whole cycles back to back for "
                f"{flow.ferry.continuous_run_seconds:.0f} s (sync, plan, copy, record, "
                "checkpoints each; heartbeats and checkpoints when due); the next run "
                "starts as it ends.")
    return ("Each run: **sync_topology** (remote topics, partitions, configs, ACLs) → "
            "**plan** (exact ranges) →\n**mirror** (Spark copy job), or **mirror_warm** "
            "(through a Spark Connect server), skipped when idle → **record** (what Delta "
            "recorded).")

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

def _warm_master(flow: Flow) -> str | None:
    """The Spark Connect server the copy runs on, None for spark-submit: the `spark_default`
    connection's, or without one, `ferry.spark.master` when it is `sc://...`."""
    from ferry.spark.connect import is_connect

    master = spark_master()
    if master is None and is_connect(flow.ferry.spark_master):
        master = flow.ferry.spark_master
    return master if master is not None and is_connect(master) else None

def plan(path: str, name: str) -> dict[str, Any]:
    """The plan step; with work, the plan file, the copy task to run and what it needs (the
    job's files for spark-submit, the server for a warm Spark)."""
    with task_edge():
        cycle = _cycle(path, name)
        planned = cycle.plan()
        result = planned.summary()
        if planned.plan_path is not None:
            warm = _warm_master(cycle.flow)
            result.update(plan_path=planned.plan_path)
            if warm is not None:
                result.update(copy="mirror_warm", master=warm)
            else:
                result.update(copy="mirror", **spark_job_files(spark_master()))
        return result

def mirror_warm(path: str, name: str, planned: dict[str, Any]) -> dict[str, Any]:
    """The copy job through a Spark Connect server, in this task's process."""
    from ferry.errors import TransientError
    from ferry.spark.connect import run_connect_job

    with task_edge():
        code = run_connect_job(path, name, planned["plan_path"], planned["master"])
        if code:
            raise TransientError(f"the copy job through {planned['master']} failed (exit "
                                 f"{code}): its lines are above; nothing past the last "
                                 "commit was kept, so a retry resumes there")
        return {"exit_code": code}

def mirror_continuously(path: str, name: str) -> dict[str, Any]:
    """Whole cycles back to back for `ferry.continuous.run.seconds` (one line each in the
    task's log); the first failed cycle fails the task (Airflow retries it)."""
    import logging

    from ferry.errors import TransientError
    from ferry.steps.cycle import CycleResult, run_continuously

    log = logging.getLogger("ferry.continuous")
    with task_edge():
        config = task_config(path)
        flow = config.flow(name)
        totals = {"cycles": 0, "copies": 0, "offsets": 0}

        def report(result: CycleResult, seconds: float) -> None:
            planned = result.planned
            copied = planned is not None and not planned.idle
            totals["cycles"] += 1
            totals["copies"] += int(copied)
            totals["offsets"] += planned.prepared.plan.span if planned and copied else 0
            log.info("cycle %s: %s in %.1fs", result.run_id,
                     f"{planned.prepared.plan.span:,} offsets copied" if planned and copied
                     else "idle", seconds, extra={"flow": flow.name})

        last = run_continuously(path, config, flow, report,
                                master=spark_master() or flow.ferry.spark_master,
                                for_s=flow.ferry.continuous_run_seconds)
        if last is not None and not last.ok:
            raise TransientError(f"flow {flow.name}: cycle {last.run_id}'s copy failed (exit "
                                 f"{last.copy_exit_code}); nothing past its last commit was "
                                 "kept, so a retry resumes there")
        return totals

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

def has_work(planned: dict[str, Any]) -> str | None:
    """The copy task to run (`mirror` or `mirror_warm`), None for an idle plan: both are
    skipped, and record and checkpoints still run."""
    return None if planned["idle"] else str(planned["copy"])

def build_dag(flow: Flow, path: str) -> Any:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG, task

    from ferry.spark.submit import job_arguments

    if flow.ferry.schedule == "@continuous":
        return _continuous_dag(flow, path)
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
        # Only the copy is skipped when idle: record and checkpoints still run.
        gate: Callable[..., Any] = task.branch(task_id="has_work")(has_work)
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
        warm = task(task_id="mirror_warm", retries=1, execution_timeout=timedelta(
            seconds=flow.ferry.mirror_timeout_seconds))(mirror_warm)(
            path, flow.name, planned)  # type: ignore[arg-type]  # an XComArg at parse time
        recorded = task(task_id="record", trigger_rule="none_failed")(record)(
            path, flow.name, planned)  # type: ignore[arg-type]  # an XComArg at parse time
        translated = task(task_id="checkpoints", trigger_rule="none_failed")(checkpoints)(
            path, flow.name)
        beat >> topology >> planned
        routed = gate(planned)
        routed >> [mirror, warm]
        [mirror, warm] >> recorded >> translated
    return dag


def _continuous_dag(flow: Flow, path: str) -> Any:
    """`ferry.schedule=@continuous`: one task running cycles back to back for
    `ferry.continuous.run.seconds`; Airflow starts the next run as this one ends."""
    from airflow.sdk import DAG, task

    with DAG(
        dag_id=flow.dag_id,
        schedule="@continuous",
        start_date=datetime(2024, 1, 1),
        catchup=False,
        max_active_runs=1,  # Airflow's rule for @continuous, and one writer per flow
        tags=["ferry", f"source:{flow.source}", f"target:{flow.target}", "continuous"],
        doc_md=doc_md(flow, path),
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    ) as dag:
        task(task_id="mirror_continuously", execution_timeout=timedelta(
            seconds=flow.ferry.continuous_run_seconds + flow.ferry.mirror_timeout_seconds))(
            mirror_continuously)(path, flow.name)
    return dag

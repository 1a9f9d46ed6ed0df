"""One Airflow DAG per enabled flow: heartbeat -> sync_topology -> plan -> mirror -> record
-> checkpoints; and `ferry_heartbeats` for the pairs without a data flow.

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

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.config import Flow, MirrorConfig, load_config

if TYPE_CHECKING:
    from ferry.steps.cycle import Cycle

CONFIG_ENV = "FERRY_CONFIG"
SPARK_CONN = "spark_default"


def config_path() -> str:
    """`$FERRY_CONFIG`, else `config/mm2.properties` in the checkout."""
    default = Path(__file__).resolve().parents[3] / "config" / "mm2.properties"
    return os.environ.get(CONFIG_ENV) or str(default)


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


@contextmanager
def task_edge() -> Iterator[None]:
    """Terminal Ferry errors fail the task without retries; others may retry."""
    from airflow.sdk.exceptions import AirflowFailException

    from ferry.errors import TerminalError

    try:
        yield
    except TerminalError as exc:
        raise AirflowFailException(str(exc)) from None


def file_safe(run_id: str) -> str:
    """Ferry's run id for an Airflow run id: the same, made safe for file names."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


def task_config(path: str) -> MirrorConfig:
    """The config a task reads (Ferry's logging set up first)."""
    from ferry import logs

    logs.setup()
    return load_config(path)


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


def spark_master() -> str | None:
    """The master of the `spark_default` connection, None when it is missing or empty."""
    from airflow.sdk import BaseHook

    try:
        connection = BaseHook.get_connection(SPARK_CONN)
    except Exception:  # the provider would silently fall back to YARN
        return None
    return str(connection.host) if connection.host else None


def spark_job_files(master: str | None) -> dict[str, str]:
    """The jars and library zip a copy job ships (XCom for the templated Spark fields);
    fails the task, naming the fix, without a `spark_default` connection."""
    from airflow.sdk.exceptions import AirflowFailException

    from ferry.spark.submit import job_conf, library_zip

    if master is None:
        raise AirflowFailException(
            f"Airflow connection {SPARK_CONN} is missing: create it (conn_type spark, host "
            f"local[*] or spark://<master>:7077), e.g. AIRFLOW_CONN_SPARK_DEFAULT="
            '\'{"conn_type": "spark", "host": "local[*]"}\'') from None
    return {"spark_jars": job_conf()["spark.jars"], "py_files": library_zip()}


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


def _spark_env() -> dict[str, str]:
    """The venv's bin first on PATH (the provider runs a bare `spark-submit`), this Python
    for the workers, the driver's address (loopback unless FERRY_SPARK_DRIVER_HOST)."""
    from ferry.spark.session import driver_host

    bin_dir = str(Path(sys.executable).parent)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": driver_host()}


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


def copy_job_settings(plan_task: str) -> dict[str, Any]:
    """SparkSubmitOperator settings of a copy job whose jars and library zip the task
    `plan_task` returned (see `spark_job_files`)."""
    from ferry.spark.submit import job_conf, job_path

    pull = f"{{{{ ti.xcom_pull(task_ids='{plan_task}')"
    return {"application": job_path(), "conn_id": SPARK_CONN, "env_vars": _spark_env(),
            "conf": {"spark.jars": pull + "['spark_jars'] }}", **job_conf(jars=False)},
            "py_files": pull + "['py_files'] }}"}


HEARTBEATS_DAG = "ferry_heartbeats"
VERIFY_DAG = "ferry_verify"


def verify_flow(path: str) -> dict[str, Any]:
    """Compare source and target record by record for the flow (and topic) in the run's
    params; fails the task on a mismatch, naming topic, partition and offsets."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException

    from ferry.steps.verify import verify

    with task_edge():
        context = get_current_context()
        params = context["params"]
        flow = _flow(path, str(params["flow"]))
        checks = verify(flow, str(params.get("topic") or "") or None,
                        run_id=str(context["run_id"]))
        bad = [c.text(flow) for c in checks if not c.ok]
        if bad:
            raise AirflowFailException("; ".join(bad[:10]))
        return {"flow": flow.name, "partitions": len(checks),
                "checked": sum(c.checked for c in checks)}


def build_verify_dag(config: MirrorConfig, path: str) -> Any:
    """`ferry_verify`: triggered from the UI with a flow (and optionally a topic); results
    go to the Delta `verify` table."""
    from airflow.sdk import DAG, Param, task

    names = [f.name for f in config.enabled_flows]
    with DAG(
        dag_id=VERIFY_DAG,
        schedule=None,
        start_date=datetime(2024, 1, 1),
        catchup=False,
        tags=["ferry", "verify"],
        doc_md="### Ferry: verify\n\nCompares source and target record by record (key, "
               "value, headers, timestamp) through the offset map; a mismatch fails the run "
               "naming topic, partition and offsets. Results: the Delta `verify` table.",
        params={
            "flow": Param(names[0], enum=names, description="the flow to verify, A->B"),
            "topic": Param("", type="string",
                           description="only this source topic (empty: every topic)"),
        },
    ) as dag:
        task(task_id="verify")(verify_flow)(path)
    return dag


def build_heartbeats_dag(config: MirrorConfig, path: str) -> Any:
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
        tags=["ferry", "heartbeats"],
        doc_md="### Ferry: heartbeats\n\nWrites a heartbeat for each pair without a data "
               "flow: " + ", ".join(f"`{f.name}`" for f in pairs) + ".",
        default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    ) as dag:
        task(task_id="heartbeat")(heartbeat)(path)
    return dag


def build_dags(config: MirrorConfig | None = None, path: str | None = None) -> dict[str, Any]:
    """dag_id -> DAG for every enabled flow of the config, `ferry_verify`, `ferry_backfill`
    and `ferry_maintenance` (when there is a flow), and `ferry_heartbeats` when some pairs emit
    heartbeats without a data flow."""
    from ferry.steps.heartbeats import heartbeat_only_pairs

    path = path or config_path()
    config = config or load_config(path)
    dags = {flow.dag_id: build_dag(flow, path) for flow in config.enabled_flows}
    if config.enabled_flows:
        from ferry.airflow.backfill import BACKFILL_DAG, build_backfill_dag
        from ferry.airflow.maintenance import MAINTENANCE_DAG, build_maintenance_dag

        dags[VERIFY_DAG] = build_verify_dag(config, path)
        dags[BACKFILL_DAG] = build_backfill_dag(config, path)
        dags[MAINTENANCE_DAG] = build_maintenance_dag(config, path)
    if heartbeat_only_pairs(config):
        dags[HEARTBEATS_DAG] = build_heartbeats_dag(config, path)
    return dags

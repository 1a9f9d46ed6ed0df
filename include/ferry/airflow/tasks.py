"""What every Ferry task shares: the config path, the task edge (Ferry's errors become
Airflow's fail-without-retry where retrying cannot help), run ids safe for file names,
and the Spark connection and job files the copy tasks use."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ferry.airflow.connections import load
from ferry.config import CONFIG_ENV, Config, Flow

SPARK_CONN = "spark_default"


def config_path() -> str:
    """`$FERRY_CONFIG`, else `config/mm2.properties` when Ferry runs from its checkout. An
    installed Ferry has no default: a ConfigError says to set the variable."""
    from ferry.errors import ConfigError, Problem

    given = os.environ.get(CONFIG_ENV, "").strip()
    if given:
        return given
    default = Path(__file__).resolve().parents[3] / "config" / "mm2.properties"
    if default.is_file():
        return str(default)
    raise ConfigError([Problem(CONFIG_ENV, "is not set, so Ferry has no config",
                               f"set {CONFIG_ENV}=/path/to/mm2.properties in Airflow's "
                               "environment")], "Ferry")


@contextmanager
def task_edge() -> Iterator[None]:
    """Terminal Ferry errors fail the task without retries; others may retry."""
    from airflow.sdk.exceptions import AirflowFailException

    from ferry.errors import TerminalError

    try:
        yield
    except TerminalError as exc:
        raise AirflowFailException(str(exc)) from None


@contextmanager
def sigterm_noted() -> Iterator[list[int]]:
    """A list that SIGTERM appends to while the block runs: how Airflow ends a task (its
    run marked failed or succeeded, its heartbeats failing), with SIGKILL 5 s later.
    Airflow's own handler (the operator's `on_kill`) is still called; it is put back after.
    Outside the main thread, where no handler can be set, the list stays empty."""
    import signal
    import threading

    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    before = signal.getsignal(signal.SIGTERM)

    def note(signum: int, frame: Any) -> None:
        noted.append(signum)
        if callable(before):
            before(signum, frame)

    signal.signal(signal.SIGTERM, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGTERM, before)


def file_safe(run_id: str) -> str:
    """Ferry's run id for an Airflow run id: the same, made safe for file names."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


def ferry_dag(dag_id: str, kind: str, doc_md: str, params: dict[str, Any],
              schedule: str | None = None, *, config: Config, **settings: Any) -> Any:
    """A Ferry DAG beside the flows' (verify, backfill, maintenance, failover): tagged
    `ferry` and `kind` (and the team's tags), its trigger form `params`, no catch-up;
    `settings` go to the DAG, the team's owner and failure callback into its default_args
    (`team_args`)."""
    from datetime import datetime

    from airflow.sdk import DAG

    settings["default_args"] = (dict(settings.get("default_args") or {})
                                | team_args(config.enabled_flows))
    return DAG(dag_id=dag_id, schedule=schedule, start_date=datetime(2024, 1, 1),
               catchup=False, tags=["ferry", kind, *team_tags(config.enabled_flows)],
               doc_md=doc_md, params=params, **settings)


def team_tags(flows: Sequence[Flow]) -> list[str]:
    """The tags a team set for `flows` (`ferry.dag.tags`): those every flow has, in the
    first's order."""
    if not flows:
        return []
    return [t for t in flows[0].ferry.dag_tags if all(t in f.ferry.dag_tags for f in flows)]


def team_args(flows: Sequence[Flow]) -> dict[str, Any]:
    """The default_args a team set for `flows` (`ferry.dag.default.args`, `ferry.dag.owner`,
    `ferry.dag.on.failure.callback`), each when every flow has the same."""
    args: dict[str, Any] = {}
    extra = {f.ferry.dag_default_args for f in flows}
    if len(extra) == 1 and (text := extra.pop()):
        args |= default_args(text)
    owners = {f.ferry.dag_owner for f in flows}
    if len(owners) == 1:
        args["owner"] = owners.pop()
    callbacks = {f.ferry.dag_on_failure_callback for f in flows}
    if len(callbacks) == 1 and (path := callbacks.pop()):
        args["on_failure_callback"] = import_callback(path)
    return args


DEFAULT_ARGS_KEY = "ferry.dag.default.args"


def default_args(text: str) -> dict[str, Any]:
    """`ferry.dag.default.args` (canonical JSON) as Airflow default_args: each name one that
    Airflow's operators take, `*_callback` names imported. A ConfigError naming the key and
    the argument otherwise (the DAG file's import error): Airflow itself would drop a
    misspelt default argument without a word."""
    import difflib
    import json

    from ferry.errors import ConfigError, Problem

    known = operator_args()
    args: dict[str, Any] = json.loads(text)
    for name, value in sorted(args.items()):
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), 1)
            raise ConfigError([Problem(
                DEFAULT_ARGS_KEY, f"{name} is not an argument of Airflow's operators",
                f"did you mean {close[0]}?" if close else "remove it (see the arguments of "
                "Airflow's BaseOperator)", text)])
        if name.endswith("_callback"):
            args[name] = import_callback(value, DEFAULT_ARGS_KEY)
    return args


@functools.cache
def operator_args() -> frozenset[str]:
    """The task arguments Airflow's operators take, as default_args may give them (read
    once per process: every DAG of the file asks)."""
    import inspect

    from airflow.sdk import BaseOperator

    return frozenset(inspect.signature(BaseOperator.__init__).parameters) - {
        "self", "task_id", "dag", "default_args", "kwargs", "task_group", "params"}


def import_callback(path: str, key: str = "ferry.dag.on.failure.callback") -> Any:
    """The function `module:function` names; a ConfigError naming `key` when it does not
    import (the DAG file's import error)."""
    import importlib

    from ferry.errors import ConfigError, Problem

    module, _, name = path.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError([Problem(key, f"{path} does not import ({exc})",
                                   "install it where Airflow parses and runs the DAGs, or "
                                   "correct the name", path)]) from None
    if not callable(found):
        raise ConfigError([Problem(key, f"{path} is not a function",
                                   "name a function taking Airflow's context", path)])
    return found


def flow_param(config: Config, description: str) -> Any:
    """The trigger form's choice of one of the config's enabled flows (the first by
    default)."""
    from airflow.sdk import Param

    names = [f.name for f in config.enabled_flows]
    return Param(names[0], enum=names, description=description)


def task_config(path: str, flow: str | None = None) -> Config:
    """The config a task reads. Ferry logs through the task's own log handlers first (so
    its lines keep their levels in the task log), and every secret the config holds is
    handed to Airflow's masker, which also masks what Airflow itself logs. A task of one
    `flow` (`A->B`) looks up the Airflow connections of that flow's two clusters only: a
    missing connection of another cluster fails only the flows that use it, and the copy
    job's snapshot holds no other flow's credentials."""
    from airflow.sdk.log import mask_secret

    from ferry import logs
    from ferry.secrets import REDACTOR

    logs.join_host()
    config = load(path, flow=flow)
    for value in REDACTOR.values():
        mask_secret(value)
    return config


def form_flow(path: str) -> tuple[Any, dict[str, Any], Config, Flow]:
    """(context, params, config, flow) of a run triggered from a form whose `flow` param
    names the flow (A->B); only that flow's clusters' connections are looked up."""
    from airflow.sdk import get_current_context

    context = get_current_context()
    params = context["params"]
    name = str(params["flow"])
    config = task_config(path, name)
    return context, params, config, config.flow(name)


def refuse_while_flow_runs(context: Any, flow: Flow, what: str) -> None:
    """Fail (no retry) while the flow's own DAG has a run queued or running: a task cannot
    pause another DAG, so the user pauses it and triggers `what` again."""
    from airflow.sdk.exceptions import AirflowFailException

    if context["ti"].get_dr_count(dag_id=flow.dag_id, states=["running", "queued"]):
        raise AirflowFailException(
            f"flow {flow.name}'s DAG {flow.dag_id} has a run in progress: pause the DAG, "
            f"wait for the run to end, then trigger the {what} again")


def spark_master() -> str | None:
    """The master of the `spark_default` connection, None when it is missing or empty. A
    connection of type `spark_connect` (the Spark provider's Spark Connect type) names a
    Connect server: its master is `sc://host:port` (port 15002 unless given)."""
    from airflow.sdk import BaseHook

    try:
        connection = BaseHook.get_connection(SPARK_CONN)
    except Exception:  # the provider would silently fall back to YARN
        return None
    if not connection.host:
        return None
    host = str(connection.host)
    if connection.conn_type == "spark_connect":
        from ferry.spark.connect import DEFAULT_PORT, SCHEME

        host = host.removeprefix(SCHEME).split(":", 1)[0].rstrip("/")
        return f"{SCHEME}{host}:{connection.port or DEFAULT_PORT}"
    return host


def warm_master(flow: Flow, connection: str | None) -> str | None:
    """The Spark Connect server the flow's copies run on, None for spark-submit: the
    master of the `spark_default` connection (`connection`, as `spark_master` gave it), or
    without one, `ferry.spark.master`, when it is `sc://...`."""
    from ferry.spark.connect import is_connect

    master = connection or flow.ferry.spark_master
    return master if is_connect(master) else None


NO_JOB_FILES: dict[str, Any] = {"spark_jars": "", "py_files": "", "driver_class_path": "",
                                "driver_java_options": "", "class_archive": None}
"""`spark_job_files` for copies on a Spark Connect server: they ship nothing (the server
has the jars, and the library goes with the session), but the copy operator's templated
fields still render."""


def spark_job_files(master: str | None) -> dict[str, Any]:
    """The jars and library zip a copy job ships (XCom for the templated Spark fields);
    fails the task, naming the fix, without a `spark_default` connection."""
    from airflow.sdk.exceptions import AirflowFailException

    from ferry.spark import installed
    from ferry.spark.connect import is_connect
    from ferry.spark.library import library_zip
    from ferry.spark.submit import driver_conf

    if master is not None and is_connect(master):
        return dict(NO_JOB_FILES)
    if master is None:
        raise AirflowFailException(
            f"Airflow connection {SPARK_CONN} is missing: create it (conn_type spark, host "
            f"local[*] or spark://<master>:7077), e.g. AIRFLOW_CONN_SPARK_DEFAULT="
            '\'{"conn_type": "spark", "host": "local[*]"}\'') from None
    with task_edge():  # a worker without pyspark: one line naming the extra to install
        installed.SparkCheck().require(master, connect=False)  # the task's one copy job
    driver, partial = driver_conf()
    return {"spark_jars": driver["spark.jars"], "py_files": library_zip(),
            "driver_class_path": driver["spark.driver.extraClassPath"],
            "driver_java_options": driver["spark.driver.extraJavaOptions"],
            "class_archive": partial}


def adopt_class_archive(files: dict[str, Any] | None) -> None:
    """After a copy job that `spark_job_files` prepared succeeded: its driver's class-data
    archive becomes the one later jobs start from (`ferry.spark.classdata`)."""
    from ferry.spark import classdata

    classdata.adopt((files or {}).get("class_archive"))


def _spark_env() -> dict[str, str]:
    """The venv's bin first on PATH (the provider runs a bare `spark-submit`), this Python
    for the workers, the driver's address (loopback unless FERRY_SPARK_DRIVER_HOST)."""
    from ferry.spark.session import driver_host

    bin_dir = str(Path(sys.executable).parent)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": driver_host()}


def job_of(task: Any) -> tuple[str, str, str]:
    """The config path, flow and plan file of a copy task (its `application_args`)."""
    args = list(task.application_args or [])
    path, flow, plan = (args[args.index(key) + 1] for key in ("--config", "--flow", "--plan"))
    return path, flow, plan


def hand_connections_to_job(context: Any) -> None:
    """Before a copy job's spark-submit: the Airflow connections of its config, looked up
    here (where Airflow is), into a snapshot beside its plan for its lanes; the job removes
    it when it ends. Nothing of them goes into the task's rendered fields or XComs."""
    from ferry.config.connections import write_snapshot

    with task_edge():
        path, flow, plan = job_of(context["task"])
        write_snapshot(plan, task_config(path, flow).connections)


def copy_job_settings(plan_task: str, key: str = "return_value") -> dict[str, Any]:
    """SparkSubmitOperator settings of a copy job whose jars and library zip the task
    `plan_task` pushed as its XCom `key` (see `spark_job_files`)."""
    from ferry.spark.submit import job_conf, job_path

    pull = f"{{{{ ti.xcom_pull(task_ids='{plan_task}', key='{key}')"
    return {"application": job_path(), "conn_id": SPARK_CONN, "env_vars": _spark_env(),
            "pre_execute": hand_connections_to_job,
            "conf": {**job_conf(), "spark.jars": pull + "['spark_jars'] }}",
                     "spark.driver.extraClassPath": pull + "['driver_class_path'] }}",
                     "spark.driver.extraJavaOptions": pull + "['driver_java_options'] }}"},
            "py_files": pull + "['py_files'] }}"}

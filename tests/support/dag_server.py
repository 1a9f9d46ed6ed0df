"""A process that has imported Airflow and Ferry once and forks one child per DAG run.

`python -m ferry.airflow.testing` in a fresh interpreter spends about 2.6 s of CPU
importing Airflow, its providers, Spark's client and Ferry before `dag.test()` starts;
and each run's first task builds the in-process execution API app (about 3 s more); the
suite runs some thirty DAGs. This server imports them and builds that app once (a run's own
CPU falls from about 4 s to 1 s), then for each request
forks a child that runs `ferry.airflow.testing.main` exactly as that process would: with
the request's environment, its stdout and stderr in files, and its exit status written
when it ends. A child starts from the server's state, which has never run a DAG: no
connection, no masked secret and no database session carries over from one run to the
next.

Airflow reads AIRFLOW_HOME and the DAG folder when it is imported, so one server serves
one pair of them (`tests.support.dags` starts one per worker for the session's home).

Protocol, one JSON line per request on stdin: `{"argv": [...], "env": {...}, "out": path,
"err": path, "status": path}`; the server answers with the child's pid on a line of its
own, and writes the child's exit code (negative: the signal that ended it) to `status`
once it has ended. It exits when stdin closes, after its children have ended.
"""

from __future__ import annotations

import faulthandler
import json
import os
import select
import sys
from pathlib import Path
from typing import Any, NoReturn

WARM = ("airflow.utils.db", "airflow.models.dag", "airflow.sdk",
        "airflow.sdk.execution_time.task_runner",
        "airflow.providers.apache.spark.operators.spark_submit", "confluent_kafka",
        "deltalake", "pyarrow", "pyspark.sql.connect.session", "ferry.airflow.dags",
        "ferry.airflow.testing", "ferry.steps.cycle",
        # what the runs import when they start their tasks: the Standard provider's
        # operators, the DAG bag's models, confluent-kafka's admin types, Ferry's steps
        "airflow.providers.standard.operators.python",
        "airflow.providers.standard.decorators.python",
        "airflow.providers.standard.decorators.branch_python",
        "airflow.providers.standard.sensors.external_task",
        "airflow.dag_processing.dagbag", "airflow.models.dagbag",
        "airflow.models.serialized_dag", "airflow.models.renderedtifields", "airflow.jobs.job",
        "confluent_kafka.admin", "ferry.airflow.copy_operator", "ferry.airflow.plugin",
        "ferry.spark.submit", "ferry.steps.heartbeats", "ferry.steps.lag", "ferry.steps.lookup",
        "ferry.steps.verify", "ferry.observe.status", "anyio._backends._asyncio", "a2wsgi")
"""What a DAG run imports anyway, imported once before the first fork."""


def _warm() -> None:
    """Import `WARM`, and build the execution API app `dag.test()` runs its tasks against
    (in-process, as the task SDK's supervisor does: a FastAPI app of versioned routes, 2-3 s
    of CPU). Only the app: its event loop and thread start in each child on its first
    request, and its DAG bag caches nothing until a run."""
    import importlib

    for name in WARM:
        importlib.import_module(name)
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    app = in_process_api_server().app
    # Cadwyn builds the app's versioned routes on its first request (most of those 2-3 s);
    # built here, before any fork, it answers each child's first request at once.
    if not app._cadwyn_initialized:
        app._cadwyn_initialize()


def _child(request: dict[str, Any]) -> NoReturn:
    """In the forked child: become the run's process, run it, exit with its code."""
    import gc

    from ferry.airflow import testing

    os.environ.clear()
    os.environ.update(request["env"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for source, target in ((stdin, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
        os.close(source)
    code = testing.main(*request["argv"])
    gc.freeze()  # as `python -m ferry.airflow.testing` exits
    sys.exit(code)


def _reap(children: dict[int, str]) -> None:
    """Write the exit status of every child that has ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        path = children.pop(pid, None)
        if path is not None:
            written = Path(f"{path}.partial")  # the client never reads half a status
            written.write_text(str(os.waitstatus_to_exitcode(status)))
            written.replace(path)


def serve() -> None:
    faulthandler.enable()
    # The protocol's answers go out on a descriptor of their own; whatever Airflow or a
    # library prints while warming (a deprecation warning, through a logger holding
    # sys.stdout) goes to stderr, where it cannot be read as an answer.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    _warm()
    print("ready", file=replies)
    children: dict[int, str] = {}
    stdin_open = True
    while stdin_open or children:
        readable, _, _ = select.select([sys.stdin] if stdin_open else [], [], [], 0.1)
        if readable:
            line = sys.stdin.readline()
            if not line:
                stdin_open = False
            else:
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    replies.close()
                    _child(request)
                children[pid] = request["status"]
                print(pid, file=replies)
        _reap(children)


if __name__ == "__main__":
    serve()

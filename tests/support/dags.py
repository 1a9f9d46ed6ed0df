"""Ferry's DAGs run once with dag.test(), each in a process of its own, and the data they
copy. A run in the session's AIRFLOW_HOME and DAG folder is a child forked from this
worker's DAG server (`tests/support/dag_server.py`: Airflow and Ferry imported once); any
other runs in a fresh interpreter."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from tests.support import runner
from tests.support.kafka_data import create_topic, produce


def run_dag(config: str, dag_id: str, conf: dict[str, Any] | None = None,
            spark_conn: dict[str, Any] | None = None, airflow_home: str | None = None,
            dags_folder: str | None = None) -> dict[str, Any]:
    """Run the DAG once with dag.test() (and the run conf: trigger-form params) in a
    process of its own; its run state, task states and mapped task instances. `spark_conn`: the
    `spark_default` connection (default: the test's Spark, `tests.support.runner`: the warm
    server's Spark Connect connection, or spark local[*] for tests marked spark_submit; {}:
    none). `airflow_home` and `dags_folder`: other than the session's and the repo's."""
    return dag_result(start_dag(config, dag_id, conf, spark_conn, airflow_home, dags_folder))


class DagProcess(Protocol):
    """A running DAG: a fresh interpreter (`subprocess.Popen`) or a forked `ForkedRun`."""

    def communicate(self, timeout: float | None = None) -> tuple[str, str]: ...

    def kill(self) -> None: ...


def start_dag(config: str, dag_id: str, conf: dict[str, Any] | None = None,
              spark_conn: dict[str, Any] | None = None, airflow_home: str | None = None,
              dags_folder: str | None = None) -> DagProcess:
    """`run_dag` without waiting: the process running the DAG (`dag_result` waits for it).
    Runs started together run at once; each needs its own `airflow_home` (SQLite takes one
    writer at a time)."""
    from ferry.airflow.testing import airflow_env

    if spark_conn is None:
        spark_conn = spark_connection()
    env = airflow_env(airflow_home or os.environ["AIRFLOW_HOME"], config)
    if dags_folder:
        env["AIRFLOW__CORE__DAGS_FOLDER"] = dags_folder
    if spark_conn == {}:  # no connection at all
        env.pop("AIRFLOW_CONN_SPARK_DEFAULT", None)
    else:
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(spark_conn)
    argv = [config, dag_id, *([json.dumps(conf)] if conf else [])]
    if airflow_home is None and dags_folder is None:
        return _server(env).run(argv, env)
    return subprocess.Popen([sys.executable, "-m", "ferry.airflow.testing", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def dag_result(process: DagProcess, timeout: float = 600) -> dict[str, Any]:
    """The run of a `start_dag` process once it ends (killed after `timeout` seconds): as
    `run_dag` returns it, its `log` the process's stdout then stderr."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    lines = [line for line in stdout.splitlines() if line.startswith("FERRY_DAG_RUN ")]
    assert lines, stdout[-3000:] + stderr[-3000:]
    run: dict[str, Any] = json.loads(lines[-1].removeprefix("FERRY_DAG_RUN "))
    run["log"] = stdout + stderr
    return run


class ForkedRun:
    """A DAG run forked by the DAG server: its output files and exit status."""

    def __init__(self, pid: int, folder: Path, server: subprocess.Popen[str]) -> None:
        self.pid = pid
        self.folder = folder
        self.server = server
        self._output: tuple[str, str] | None = None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the run to end (TimeoutExpired after `timeout` s); its stdout, stderr."""
        if self._output is not None:
            return self._output
        deadline = None if timeout is None else time.monotonic() + timeout
        status = self.folder / "status"
        while not status.exists():
            if self.server.poll() is not None and not status.exists():
                raise AssertionError(f"the DAG server ended ({self.server.returncode}) "
                                     f"before run {self.pid} was reported")
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"DAG run {self.pid}", timeout or 0)
            time.sleep(0.1)
        self._output = ((self.folder / "out").read_text(errors="replace"),
                        (self.folder / "err").read_text(errors="replace"))
        shutil.rmtree(self.folder, ignore_errors=True)
        return self._output

    def kill(self) -> None:
        """SIGKILL, unless it has ended already (its pid may belong to another process)."""
        if not (self.folder / "status").exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class _DagServer:
    """This worker's `tests.support.dag_server` process for one AIRFLOW_HOME."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.dag_server"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        assert ready.strip() == "ready", f"the DAG server did not start: {ready!r}"
        atexit.register(self.close)

    def run(self, argv: list[str], env: dict[str, str]) -> ForkedRun:
        folder = Path(tempfile.mkdtemp(prefix="ferry-dag-run-"))
        request = {"argv": argv, "env": env, "out": str(folder / "out"),
                   "err": str(folder / "err"), "status": str(folder / "status")}
        assert self.process.stdin is not None and self.process.stdout is not None
        # one request at a time: a worker's tests run one after another
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        pid = int(self.process.stdout.readline())
        return ForkedRun(pid, folder, self.process)

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


_started: list[_DagServer] = []


def _server(env: dict[str, str]) -> _DagServer:
    """This worker's DAG server for the session's AIRFLOW_HOME and the repo's DAG folder
    (Airflow reads both once, when it is imported), started on first use."""
    if not _started:
        _started.append(_DagServer(env))
    return _started[0]


def spark_connection() -> dict[str, Any]:
    """The test's `spark_default` connection: the session's warm Spark Connect server, or
    spark-submit on local[*] for a test marked spark_submit."""
    master = runner.warm_master()
    if master is None:
        return {"conn_type": "spark", "host": "local[*]"}
    host, port = master.removeprefix("sc://").split(":")
    return {"conn_type": "spark_connect", "host": host, "port": int(port)}


def two_partitions_of(clusters: dict[str, str], topic: str, records: int) -> None:
    """`topic` on the source, 2 partitions, `records` records spread over them."""
    create_topic(clusters["source"], topic, 2)
    produce(clusters["source"], topic, [(None, f"v{i}".encode(), i % 2)
                                        for i in range(records)])

"""Ferry's DAGs run once with dag.test() in a fresh interpreter, and the data they copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.support import runner
from tests.support.kafka_data import create_topic, produce


def run_dag(config: str, dag_id: str, conf: dict[str, Any] | None = None,
            spark_conn: dict[str, Any] | None = None, airflow_home: str | None = None,
            dags_folder: str | None = None) -> dict[str, Any]:
    """Run the DAG once with dag.test() (and the run conf: trigger-form params) in a fresh
    process; its run state, task states and mapped task instances. `spark_conn`: the
    `spark_default` connection (default: the test's Spark, `tests.support.runner`: the warm
    server's Spark Connect connection, or spark local[*] for tests marked spark_submit; {}:
    none). `airflow_home` and `dags_folder`: other than the session's and the repo's."""
    return dag_result(start_dag(config, dag_id, conf, spark_conn, airflow_home, dags_folder))


def start_dag(config: str, dag_id: str, conf: dict[str, Any] | None = None,
              spark_conn: dict[str, Any] | None = None, airflow_home: str | None = None,
              dags_folder: str | None = None) -> subprocess.Popen[str]:
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
    extra = [json.dumps(conf)] if conf else []
    return subprocess.Popen([sys.executable, "-m", "ferry.airflow.testing", config, dag_id,
                             *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def dag_result(process: subprocess.Popen[str], timeout: float = 600) -> dict[str, Any]:
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

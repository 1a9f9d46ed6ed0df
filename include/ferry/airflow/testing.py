"""Run a flow's DAG once in-process with `dag.test()` (tests and the demo).

Airflow must see its environment before it is imported, so callers run this module as
a process: `python -m ferry.airflow.testing CONFIG DAG_ID` with `AIRFLOW_HOME` set. It
migrates the metadata DB when needed, runs the DAG and prints one JSON line with the run's
state and each task's state.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def airflow_env(airflow_home: str, config: str) -> dict[str, str]:
    """The environment for an in-process DAG run of Ferry's DAGs on SQLite."""
    repo = Path(__file__).resolve().parents[3]
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": airflow_home,
        "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        "FERRY_CONFIG": config,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    })
    return env


def main(config: str, dag_id: str) -> int:
    from airflow.utils.db import initdb, upgradedb  # noqa: F401 - checks the DB module loads

    from ferry.airflow.dags import build_dags

    home = Path(os.environ["AIRFLOW_HOME"])
    if not (home / "airflow.db").exists():
        import subprocess

        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                       check=True, stdout=subprocess.DEVNULL)
    dag = build_dags(path=config)[dag_id]
    run = dag.test()
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print("FERRY_DAG_RUN " + json.dumps({"state": str(run.state), "tasks": states,
                                         "run_id": run.run_id}))
    return 0 if str(run.state) == "success" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

"""Run a flow's DAG once in-process with `dag.test()` (tests and the demo).

Airflow must see its environment before it is imported, so callers run this module as
a process: `python -m ferry.airflow.testing CONFIG DAG_ID [CONF_JSON]` with `AIRFLOW_HOME`
set. It migrates the metadata DB when needed, runs the DAG (one of Ferry's, or another DAG
of the DAG folder: a downstream DAG) with the run conf (the trigger form's params) and
prints one JSON line with the run's state, each task's state, each mapped task instance's
state and label, the XComs, the Asset events the run emitted and the DAGs they queued.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import Any


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


def main(config: str, dag_id: str, conf: str = "") -> int:
    from airflow.utils.db import initdb, upgradedb  # noqa: F401 - checks the DB module loads

    from ferry.airflow.dags import build_dags

    home = Path(os.environ["AIRFLOW_HOME"])
    if not (home / "airflow.db").exists():
        import subprocess

        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                       check=True, stdout=subprocess.DEVNULL)
    dag = build_dags(path=config).get(dag_id) or _from_dag_folder(dag_id)
    run = dag.test(run_conf=json.loads(conf) if conf else None)
    instances = run.get_task_instances()
    states = {ti.task_id: str(ti.state) for ti in instances if ti.map_index < 0}
    mapped: dict[str, list[dict[str, object]]] = {}
    for ti in sorted(instances, key=lambda t: t.map_index):
        if ti.map_index >= 0:
            states[ti.task_id] = str(ti.state)  # the last one's
            mapped.setdefault(ti.task_id, []).append(
                {"map_index": ti.map_index, "state": str(ti.state),
                 "label": ti.rendered_map_index})
    xcoms, rendered = _stored(dag_id, run.run_id)
    events, queued = _asset_events(dag_id, run.run_id)
    print("FERRY_DAG_RUN " + json.dumps({"state": str(run.state), "tasks": states,
                                         "run_id": run.run_id, "mapped": mapped,
                                         "xcoms": xcoms, "rendered": rendered,
                                         "asset_events": events, "queued_dags": queued}))
    return 0 if str(run.state) == "success" else 1


def _from_dag_folder(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag().get_dag(dag_id)  # $AIRFLOW__CORE__DAGS_FOLDER
    if dag is None:
        raise SystemExit(f"no DAG {dag_id!r} among Ferry's or in the DAG folder")
    return dag


def _asset_events(dag_id: str, run_id: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The Asset events the run emitted (URI and extra), and the DAGs they queued for the
    scheduler (asset-triggered runs waiting to start)."""
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = [{"uri": uri, "extra": extra} for uri, extra in session.query(
            AssetModel.uri, AssetEvent.extra).join(
                AssetEvent, AssetEvent.asset_id == AssetModel.id).filter(
                    AssetEvent.source_dag_id == dag_id,
                    AssetEvent.source_run_id == run_id).order_by(AssetEvent.id)]
        queued = sorted({q.target_dag_id for q in session.query(AssetDagRunQueue)})
    return events, queued


def _stored(dag_id: str, run_id: str) -> tuple[dict[str, str], dict[str, str]]:
    """What the run left in the metadata DB for anyone to see: XComs and rendered template
    fields (tests check that no secret is among them)."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        xcoms = {f"{x.task_id}.{x.key}": json.dumps(x.value, default=str) for x in
                 session.query(XComModel).filter(XComModel.dag_id == dag_id,
                                                 XComModel.run_id == run_id)}
        rendered = {r.task_id: json.dumps(r.rendered_fields, default=str) for r in
                    session.query(RenderedTaskInstanceFields).filter(
                        RenderedTaskInstanceFields.dag_id == dag_id,
                        RenderedTaskInstanceFields.run_id == run_id)}
    return xcoms, rendered


if __name__ == "__main__":
    code = main(*sys.argv[1:4])
    # The interpreter's last garbage collections walk every object Airflow, Spark's client
    # and Ferry loaded: about 2 s of a small DAG's 7-10 s run. Frozen objects are left out
    # of them; the exit is otherwise the usual one (threads joined, exit handlers run).
    gc.freeze()
    sys.exit(code)

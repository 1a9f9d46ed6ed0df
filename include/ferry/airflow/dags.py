"""Every Ferry DAG of a config: one per enabled flow (`flow_dag`), `ferry_verify`,
`ferry_backfill`, `ferry_maintenance`, `ferry_failover`, `ferry_adopt`, and
`ferry_heartbeats` for the pairs without a data flow. Parse time stays cheap: only the
config file is read."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ferry.airflow.connections import load
from ferry.airflow.flow_dag import build_dag
from ferry.airflow.heartbeats_dag import HEARTBEATS_DAG, build_heartbeats_dag
from ferry.airflow.tasks import config_path
from ferry.airflow.verify_dag import VERIFY_DAG, build_verify_dag
from ferry.config import Config


def build_dags(config: Config | None = None, path: str | None = None) -> dict[str, Any]:
    """dag_id -> DAG for every enabled flow of the config, `ferry_verify`, `ferry_backfill`,
    `ferry_maintenance`, `ferry_failover` and `ferry_adopt` (when there is a flow), and
    `ferry_heartbeats` when some pairs emit heartbeats without a data flow. A task's own
    process, which parses the file for one DAG (Airflow's parsing context), gets that DAG
    only: with many flows, building every DAG before each task was most of its start."""
    from airflow.sdk import get_parsing_context

    from ferry.steps.heartbeats import heartbeat_only_pairs

    path = path or config_path()
    wanted = get_parsing_context().dag_id
    # Parsing looks up no connection: a DAG file parsed every 30 s must not call a secrets
    # backend each time, nor lose its DAGs while that backend is down. Tasks look them up.
    config = config or _parsed_config(path, wanted)
    builders: dict[str, Callable[[], Any]] = {
        flow.dag_id: partial(build_dag, flow, path) for flow in config.enabled_flows}
    if config.enabled_flows:
        from ferry.airflow.adopt_dag import ADOPT_DAG, build_adopt_dag
        from ferry.airflow.backfill_dag import BACKFILL_DAG, build_backfill_dag
        from ferry.airflow.failover_dag import FAILOVER_DAG, build_failover_dag
        from ferry.airflow.maintenance_dag import MAINTENANCE_DAG, build_maintenance_dag

        builders[VERIFY_DAG] = partial(build_verify_dag, config, path)
        builders[BACKFILL_DAG] = partial(build_backfill_dag, config, path)
        builders[MAINTENANCE_DAG] = partial(build_maintenance_dag, config, path)
        builders[FAILOVER_DAG] = partial(build_failover_dag, config, path)
        builders[ADOPT_DAG] = partial(build_adopt_dag, config, path)
    if heartbeat_only_pairs(config):
        builders[HEARTBEATS_DAG] = partial(build_heartbeats_dag, config, path)
    if wanted in builders:
        return {wanted: builders[wanted]()}
    return {dag_id: build() for dag_id, build in builders.items()}


def _parsed_config(path: str, wanted: str | None) -> Config:
    """The config a parse builds its DAGs from: in a flow's task's own process (`wanted`
    names the flow's DAG), that flow and its reverse only (`load_config`); else all of it."""
    if wanted is not None and "_to_" in wanted:  # only a flow's DAG id has it
        try:
            return load(path, connections=False, flow=wanted)
        except KeyError:  # a flow no longer in the config: every DAG, as Airflow expects
            pass
    return load(path, connections=False)

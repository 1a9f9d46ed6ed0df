"""Ferry's DAG file: one DAG per enabled flow of Ferry's config ($FERRY_CONFIG, else
config/mm2.properties in a checkout), plus ferry_verify, ferry_backfill, ferry_maintenance,
ferry_failover, ferry_adopt and ferry_heartbeats.

Airflow's DAG folder needs this file: `ferry dag-file > $AIRFLOW_HOME/dags/ferry_flows.py`
copies it there from the installed package. Thin on purpose: the factory lives in
`ferry.airflow.dags`. A broken config shows here as an import error listing every problem.
"""

from __future__ import annotations

from ferry.airflow.dags import build_dags

globals().update(build_dags())

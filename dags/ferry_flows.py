"""One DAG per enabled flow of Ferry's config ($FERRY_CONFIG, else config/mm2.properties).

Thin on purpose: the factory lives in `ferry.airflow.dags`. A broken config shows here as
an import error listing every problem.
"""

from __future__ import annotations

from ferry.airflow.dags import build_dags

globals().update(build_dags())

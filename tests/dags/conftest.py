"""Airflow reads its environment on import: give the test session its own AIRFLOW_HOME
(SQLite) before anything imports airflow."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_HOME = Path(tempfile.mkdtemp(prefix="ferry-airflow-"))
os.environ.setdefault("AIRFLOW_HOME", str(_HOME))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER",
                      str(Path(__file__).resolve().parents[2] / "dags"))

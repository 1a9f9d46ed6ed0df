"""Airflow reads its environment on import: give the test session its own AIRFLOW_HOME
(SQLite) before anything imports airflow."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_HOME = Path(tempfile.mkdtemp(prefix="ferry-airflow-"))
os.environ.setdefault("AIRFLOW_HOME", str(_HOME))
_CREATOR = os.getpid()


def _remove_home() -> None:
    """Removed as the session's process ends; not by a forked child of it (the DAG server's
    runs) that exits while the session goes on."""
    if os.getpid() == _CREATOR:
        shutil.rmtree(_HOME, ignore_errors=True)


atexit.register(_remove_home)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER",
                      str(Path(__file__).resolve().parents[2] / "dags"))

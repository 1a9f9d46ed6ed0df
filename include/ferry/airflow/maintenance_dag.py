"""`ferry_maintenance`: compact and vacuum the Delta state tables daily, one task per
table, next to running flows (adapter; the work is `ferry.state.maintain`).

Parse time stays cheap: the tables come from `StatePaths` (no storage is touched) and the
config file is read once by the caller.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ferry.config import Config
from ferry.core.retention import (
    DEFAULT_RETENTION_HOURS,
    SAFE_MINIMUM_RETENTION_HOURS,
    state_dirs,
    state_tables,
)

MAINTENANCE_DAG = "ferry_maintenance"
SCHEDULE = "@daily"


def maintain_table(path: str, table: str) -> dict[str, Any]:
    """Maintain `table` in every state directory of the config, with the run's params.
    The XCom is the report: paths, counts and sizes, no client settings."""
    import logging

    from airflow.sdk import get_current_context

    from ferry.airflow.tasks import task_config, task_edge
    from ferry.state.maintain import maintain

    with task_edge():
        params = get_current_context()["params"]
        report = maintain(task_config(path), int(params["retention_hours"]),
                          bool(params["dry_run"]), tables=(table,),
                          option="the retention_hours param")
        logging.getLogger("ferry.maintenance").info("%s", report.text())
        return report.to_json()


def doc_md(config: Config, path: str) -> str:
    dirs = ", ".join(f"`{d}`" for d in state_dirs(config)) or "none (no enabled flow)"
    return f"""### Ferry: maintenance

Every day, for each Delta state table (one task each) in {dirs}:

1. **compact** each flow partition that has gathered small files (one commit per
   partition; appends by running flows are kept),
2. **checkpoint** the log, so readers start from the compacted state,
3. **vacuum** files replaced more than `retention_hours` ago (default
   {DEFAULT_RETENTION_HOURS}, never below {SAFE_MINIMUM_RETENTION_HOURS}: running flows and
   readers may still read them), and stray files no snapshot references that are older.

Trigger with `dry_run` to see what would change. Same as `ferry maintain {path} --execute`.
"""


def build_maintenance_dag(config: Config, path: str) -> Any:
    """`ferry_maintenance`: daily, one run at a time, a task per state table."""
    from airflow.sdk import Param, task

    from ferry.airflow.tasks import ferry_dag

    with ferry_dag(
        MAINTENANCE_DAG, "maintenance", doc_md(config, path),
        schedule=SCHEDULE,
        max_active_runs=1,
        max_active_tasks=2,  # light next to the flows' own tasks
        default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
        config=config, params={
            "retention_hours": Param(
                DEFAULT_RETENTION_HOURS, type="integer", minimum=SAFE_MINIMUM_RETENTION_HOURS,
                description="delete files replaced (or left by no commit) more than this "
                            f"many hours ago; at least {SAFE_MINIMUM_RETENTION_HOURS}, as "
                            "running flows and readers may still read them"),
            "dry_run": Param(False, type="boolean",
                             description="only report what would be compacted and deleted"),
        },
    ) as dag:
        for table in state_tables():
            task(task_id=table)(maintain_table)(path, table)
    return dag

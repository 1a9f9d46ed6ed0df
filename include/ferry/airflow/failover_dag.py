"""`ferry_failover`: `ferry failover` from the Airflow UI, with a trigger form (flow, mode,
groups, deadline, execute). Its one task runs `ferry.steps.failover` and returns the
report (every group partition, the data at risk, the fail-back flow) as its XCom; an
executed failover also stores it under the state dir.

A planned failover refuses to start while the flow's own DAG has a run queued or running:
pause that DAG first (a task cannot pause another DAG), so that nothing copies beside the
catch-up and the translation. By default the form only shows what would be done.
"""

from __future__ import annotations

from typing import Any

from ferry.airflow.tasks import (
    ferry_dag,
    flow_param,
    form_flow,
    refuse_while_flow_runs,
    spark_master,
    task_edge,
)
from ferry.config import Config

FAILOVER_DAG = "ferry_failover"


def fail_over(path: str) -> dict[str, Any]:
    """The failover the run's params describe; its report."""
    import logging

    from ferry.steps import failover

    with task_edge():
        context, params, config, flow = form_flow(path)
        execute = bool(params["execute"])
        groups = str(params.get("groups") or "") or None
        if params["mode"] == failover.PLANNED:
            if execute:
                refuse_while_flow_runs(context, flow, "failover")
            report = failover.planned(path, config, flow, groups=groups,
                                      deadline_s=float(params["deadline_seconds"]),
                                      master=spark_master() or flow.ferry.spark_master,
                                      execute=execute)
        else:
            report = failover.unplanned(config, flow, groups=groups, execute=execute)
        for line in report.text().splitlines():
            logging.getLogger("ferry.failover").info("%s", line, extra={"flow": flow.name})
        return report.to_json()


def build_failover_dag(config: Config, path: str) -> Any:
    from airflow.sdk import Param, task

    with ferry_dag(FAILOVER_DAG, "failover", __doc__ or "", max_active_runs=1, config=config,
                   params={
        "flow": flow_param(config, "The flow whose consumer groups move to its target, "
                                   "A->B."),
        "mode": Param("planned", enum=["planned", "unplanned"], description="planned: the "
                      "source is up and its producers stopped (catch up, then translate); "
                      "unplanned: the source is gone (never contacted; the last "
                      "translations, and the data at risk)."),
        "groups": Param("", type="string", description="A regular expression over whole "
                        "group ids (within the flow's groups filter); empty: every group."),
        "deadline_seconds": Param(600, type="integer", minimum=1, description="planned: how "
                                  "long the catch-up cycles may take."),
        "execute": Param(False, type="boolean", description="Off: only show what would be "
                         "done. On: catch up and commit the groups on the target."),
    }) as dag:
        task(task_id="failover", retries=0)(fail_over)(path)
    return dag

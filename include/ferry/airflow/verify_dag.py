"""`ferry_verify`: check a flow's mirror record by record, on demand (a param picks the
flow)."""

from __future__ import annotations

from typing import Any

from ferry.airflow.tasks import ferry_dag, flow_param, task_config, task_edge
from ferry.config import Config

VERIFY_DAG = "ferry_verify"


def verify_flow(path: str) -> dict[str, Any]:
    """Compare source and target record by record for the flow (and topic) in the run's
    params; fails the task on a mismatch, naming topic, partition and offsets."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException

    from ferry.steps.verify import verify

    with task_edge():
        context = get_current_context()
        params = context["params"]
        name = str(params["flow"])
        flow = task_config(path, name).flow(name)
        checks = verify(flow, str(params.get("topic") or "") or None,
                        run_id=str(context["run_id"]))
        bad = [c.text(flow) for c in checks if not c.ok]
        if bad:
            raise AirflowFailException("; ".join(bad[:10]))
        return {"flow": flow.name, "partitions": len(checks),
                "checked": sum(c.checked for c in checks)}


def build_verify_dag(config: Config, path: str) -> Any:
    """`ferry_verify`: triggered from the UI with a flow (and optionally a topic); results
    go to the Delta `verify` table."""
    from airflow.sdk import Param, task

    with ferry_dag(
        VERIFY_DAG, "verify",
        "### Ferry: verify\n\nCompares source and target record by record (key, value, "
        "headers, timestamp) through the offset map; a mismatch fails the run naming topic, "
        "partition and offsets. Results: the Delta `verify` table.",
        config=config, params={
            "flow": flow_param(config, "the flow to verify, A->B"),
            "topic": Param("", type="string",
                           description="only this source topic (empty: every topic)"),
        },
    ) as dag:
        task(task_id="verify")(verify_flow)(path)
    return dag

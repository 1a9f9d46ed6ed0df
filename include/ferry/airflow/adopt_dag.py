"""`ferry_adopt`: `ferry adopt` from the Airflow UI, with a trigger form (flow, the mirror
taken over, where its progress is, how long it must stand still, execute). Its one task
runs `ferry.steps.adopt` and returns the report (per partition: the old mirror's progress,
where Ferry continues, what it found doubled, missing, extra or altered) as its XCom.

Stop the old mirror first. An executed adoption refuses to start while the flow's own DAG
has a run queued or running (pause it until the adoption is done), and the adoption itself
refuses while the old mirror's progress still moves. By default the form only shows what
would be done.
"""

from __future__ import annotations

from typing import Any

from ferry.airflow.tasks import ferry_dag, flow_param, form_flow, refuse_while_flow_runs, task_edge
from ferry.config import Config

ADOPT_DAG = "ferry_adopt"


def take_over(path: str) -> dict[str, Any]:
    """The adoption the run's params describe; its report."""
    import logging

    from airflow.sdk.exceptions import AirflowFailException

    from ferry.steps.adopt import adopt

    with task_edge():
        context, params, _, flow = form_flow(path)
        execute = bool(params["execute"])
        if execute:
            refuse_while_flow_runs(context, flow, "adoption")
        report = adopt(flow, str(params["from"]),
                       offsets_topic=str(params.get("offsets_topic") or "") or None,
                       connector=str(params.get("connector") or "") or None,
                       group=str(params.get("group") or "") or None,
                       settle_s=float(params["settle_seconds"]), execute=execute,
                       window=int(params["window"]))
        for line in report.text().splitlines():
            logging.getLogger("ferry.adopt").info("%s", line, extra={"flow": flow.name})
        if report.refused and execute:  # a dry run's XCom shows them ("ok": false)
            raise AirflowFailException(
                f"{len(report.refused)} partitions were not adopted: "
                + "; ".join(f"{p.topic}-{p.partition}: {p.reason}"
                            for p in report.refused[:5]))
        return report.to_json()


def build_adopt_dag(config: Config, path: str) -> Any:
    from airflow.sdk import Param, task

    with ferry_dag(ADOPT_DAG, "adopt", __doc__ or "", max_active_runs=1, config=config,
                   params={
        "flow": flow_param(config, "The flow that takes over, A->B."),
        "from": Param("mm2", enum=["mm2", "mm1"], description="The mirror taken over: "
                      "MirrorMaker 2 (its progress in Kafka Connect's offset storage) or "
                      "MirrorMaker 1 (its consumer group's offsets)."),
        "offsets_topic": Param("", type="string", description="mm2: Connect's offsets topic "
                               "on the target; empty: where the config puts it "
                               "(mm2-offsets.<source>.internal in dedicated mode, "
                               "mirrormaker2-cluster-offsets for Strimzi)."),
        "connector": Param("", type="string", description="mm2: only this connector's "
                           "progress (on a Connect cluster, the name you gave "
                           "MirrorSourceConnector); empty: any."),
        "group": Param("", type="string", description="mm1: its consumer group "
                       "(consumer.config's group.id)."),
        "settle_seconds": Param(65, type="integer", minimum=0, description="How long the old "
                                "mirror's progress must stand still (past its 60 s flush "
                                "interval)."),
        "window": Param(100_000, type="integer", minimum=1, description="The longest "
                        "replay or hole the alignment recognises (memory about 600 bytes "
                        "per record of window)."),
        "execute": Param(False, type="boolean", description="Off: only show what would be "
                         "done. On: write the positions and offset-map entries."),
    }) as dag:
        task(task_id="adopt", retries=0)(take_over)(path)
    return dag

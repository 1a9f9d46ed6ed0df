"""`ferry_backfill`: copy a window of a flow's source topics from the Airflow UI.

Triggered with a form (typed Params): flow, topic regex, from, to, target topic, chunk size,
what to do about a gap. `plan` resolves and checks the window (`ferry.steps.backfill`): an
overlap with what the destination already holds, or a gap under `on_gap=fail`, fails it
before anything is written. `copy_chunk` is the copy job mapped over the chunks, one at a
time in order, each labelled in the UI (`chunk 2/5: orders, 4 partitions, 400,000
offsets`): through spark-submit, or in the task's process on the flow's Spark Connect
server when it has one (`ferry.airflow.copy_operator`); `report` sums what the chunks
recorded in the `runs` table.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ferry.airflow.tasks import (
    adopt_class_archive,
    copy_job_settings,
    ferry_dag,
    file_safe,
    flow_param,
    spark_job_files,
    spark_master,
    task_config,
    task_edge,
    warm_master,
)
from ferry.config import Config

BACKFILL_DAG = "ferry_backfill"


def plan_backfill(path: str) -> dict[str, Any]:
    """Plan the run's backfill; its XCom carries the chunks' job arguments and labels."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException

    from ferry.spark.submit import job_arguments
    from ferry.steps.backfill import BackfillRequest, prepare_backfill

    with task_edge():
        context = get_current_context()
        params = context["params"]
        name = str(params["flow"])
        flow = task_config(path, name).flow(name)
        target_topic = str(params.get("target_topic") or "")
        if not target_topic:
            running = context["ti"].get_dr_count(dag_id=flow.dag_id,
                                                 states=["running", "queued"])
            if running:
                raise AirflowFailException(
                    f"flow {flow.name}'s DAG {flow.dag_id} has a run in progress: a backfill "
                    "into its remote topics must not copy beside it. Pause the DAG, wait for "
                    "the run to end, then trigger the backfill again")
        request = BackfillRequest(
            topics=str(params["topics"]), start=str(params["from"]), end=str(params["to"]),
            target_topic=target_topic, chunk_records=int(params["chunk_records"]),
            on_gap=str(params["on_gap"]))
        run_id = file_safe(f"backfill.{context['run_id']}")
        connection = spark_master()
        master = warm_master(flow, connection) or connection
        run = prepare_backfill(flow, request, run_id, master)
        result = run.summary()
        if not run.chunk_files:
            return result | {"chunks": []}
        # Mapped tasks may start in any order (dag.test() does); a chunk started before
        # the one it follows copies nothing (its lane finds no position where its plan
        # expects one) and is copied on its retry, after the earlier chunk.
        result["chunks"] = [
            {"application_args": job_arguments(path, flow.name, file), "name": label}
            for file, label in zip(run.chunk_files, result["chunk_labels"], strict=True)]
        return result | spark_job_files(master)


def chunk_list(planned: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks' operator arguments (Airflow maps only over a task's return value)."""
    return list(planned["chunks"])


def report(path: str, planned: dict[str, Any]) -> dict[str, Any]:
    """What the chunks recorded (the `runs` table); fails when a range failed or was handed
    over to another run."""
    import logging

    from airflow.sdk.exceptions import AirflowFailException

    from ferry.core.tables import StatePaths, copied_by_run, final_attempts
    from ferry.state.reader import rows

    with task_edge():
        adopt_class_archive(planned)  # every chunk succeeded (trigger rule none_failed)
        name = str(planned["flow"])
        flow = task_config(path, name).flow(name)
        # The last attempt at each range: a chunk run out of order fails, then is copied
        # on its retry.
        runs = final_attempts([r for r in rows(StatePaths(flow.ferry.state_dir).runs, flow.name)
                               if str(r["run_id"]).startswith(f"{planned['run_id']}.chunk-")])
        summary = {"run_id": planned["run_id"], "chunks": len(planned["chunks"]),
                   "records": sum(r["records"] for r in runs),
                   "bytes": sum(r["bytes"] for r in runs),
                   "destinations": planned["destinations"], "gaps": planned["gaps"]}
        # a range handed over to a newer backfill run is not this backfill's copy either:
        # that run copies its own ranges, not necessarily these
        failed = [f"{r['topic']}-{r['partition']}: {r['error']}" for r in runs
                  if not copied_by_run(r["outcome"])]
        if failed:
            raise AirflowFailException("backfill ranges failed: " + "; ".join(failed[:5]))
        logging.getLogger("ferry.backfill").info("backfill recorded: %s", summary,
                                                 extra={"flow": flow.name})
        return summary


def build_backfill_dag(config: Config, path: str) -> Any:
    from airflow.sdk import Param, task

    from ferry.airflow.copy_operator import CopyJobOperator

    with ferry_dag(
        BACKFILL_DAG, "backfill", __doc__ or "",
        max_active_runs=1,
        config=config, params={
            "flow": flow_param(config, "The flow whose source topics are copied, A->B."),
            "topics": Param(".*", type="string", minLength=1, description="A regular "
                            "expression (whole name) over the source topics the flow "
                            "mirrors."),
            "from": Param("earliest", type="string", minLength=1, description="Where to "
                          "start: earliest, a source offset (every partition), or an ISO "
                          "time such as 2026-11-26T08:00:00Z (UTC when no zone is given)."),
            "to": Param("latest", type="string", minLength=1, description="Where to stop "
                        "(exclusive): latest (the end when the run starts), a source offset, "
                        "or an ISO time."),
            "target_topic": Param("", type="string", description="Empty: the flow's remote "
                                  "topic (the backfill continues the flow: it must start "
                                  "where the flow stands or on a topic never mirrored). Or a "
                                  "topic of its own, e.g. investigation.{topic}."),
            "chunk_records": Param(100_000, type="integer", minimum=1, description="Offsets "
                                   "per partition in one chunk (one mapped task)."),
            "on_gap": Param("fail", enum=["fail", "continue"], description="Records deleted "
                            "by retention inside the window are always reported (gaps "
                            "table); fail copies nothing, continue copies the rest."),
        },
        default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    ) as dag:
        planned: Any = task(task_id="plan", retries=0)(plan_backfill)(path)
        chunks = CopyJobOperator.partial(
            task_id="copy_chunk",
            max_active_tis_per_dag=1,  # one at a time
            map_index_template="{{ task.name }}",
            **copy_job_settings("plan"),
        ).expand_kwargs(task(task_id="chunks")(chunk_list)(planned))
        summary = task(task_id="report", trigger_rule="none_failed")(report)(path, planned)
        chunks >> summary
    return dag

"""One Airflow DAG per enabled flow: `cycle` (-> `copy` -> `finish` when the copy needs
spark-submit). Its steps are those of `ferry.steps.cycle`: heartbeat, sync, plan, copy,
record, checkpoints.

- `cycle` runs the whole cycle in one task process when it can: always for an idle plan
  (nothing to copy, no gap, offset map up to date: no JVM starts), and when the copy runs on
  a Spark Connect server (a `spark_connect` connection, or `ferry.spark.master=sc://...`
  without one), from this process: a warm Spark, no JVM either. Task processes cost seconds
  each under a real scheduler, so a run is one of them.
- Otherwise `cycle` ends after the plan and branches to `copy`: the Spark provider's
  SparkSubmitOperator running `ferry/jobs/ferry_copy.py` (`spark_default` connection, `local[*]`
  in the embedded setup) with its own retry and timeout; then `finish` records the run and
  translates the groups. A failed copy leaves `finish` upstream_failed.

`cycle` pushes what each step did as its `summary` XCom, and the plan as `plan` (names and
counts only, never client settings). With `ferry.schedule=@continuous` the DAG is one task,
`mirror_continuously`: whole cycles back to back (`ferry.steps.cycle.run_continuously`,
each exactly once). Airflow starts a run every span (`ferry.continuous.run.seconds`, the
flow's own within 10%; two runs at most at once), and a run copies on past its span until
the next one names itself the flow's newest, then hands over to it and ends
(`ferry.core.takeover`; `ferry.continuous.handover.seconds` at the latest): the flow copies
through the turn, where Airflow's own `@continuous` schedule (one run at a time) left it
copying nothing from one run's last cycle to the next one's first.

Parse time stays cheap: only the config file is read. Ferry errors become Airflow's
fail-without-retry at the task edge when retrying cannot help.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ferry.airflow.assets import outlets
from ferry.airflow.tasks import (
    adopt_class_archive,
    copy_job_settings,
    file_safe,
    sigterm_noted,
    spark_job_files,
    spark_master,
    task_config,
    task_edge,
    team_args,
    team_tags,
)
from ferry.config import Flow
from ferry.core.spans import longest_span, run_end, run_span
from ferry.core.takeover import Named

if TYPE_CHECKING:
    from ferry.steps.cycle import Cycle


def schedule_of(flow: Flow) -> str | None:
    return None if flow.ferry.schedule == "none" else flow.ferry.schedule


def doc_md(flow: Flow, path: str) -> str:
    policy = flow.policy.class_name.rsplit(".", 1)[-1]
    return f"""### Ferry: {flow.source} → {flow.target}

Mirrors the topics of **{flow.source}** matching `{flow.topics.include}` (excluding
`{flow.topics.exclude}`) to **{flow.target}** in exact offset ranges, exactly once
(`ferry.delivery={flow.ferry.delivery}`). Remote topics are named by {policy}:
`orders` → `{flow.remote_topic("orders")}`.

{_run_doc(flow)}

Config: `{path}` · schedule `{flow.ferry.schedule}` · state `{flow.ferry.state_dir}`.
Look up a record: `ferry offsets {path} --flow '{flow.name}' --topic T --partition P
--source-offset N`.
"""


def _run_doc(flow: Flow) -> str:
    if flow.ferry.schedule == "@continuous":
        span = run_span(flow.name, flow.ferry.continuous_run_seconds)
        each = ("Each run: **mirror_continuously**, whole cycles back to back (sync, plan, "
                "copy, record; heartbeats and checkpoints when due).")
        if not overlaps(flow):
            return f"{each} A run copies for {span:.0f} s; the next starts as it ends."
        return (f"{each} A run starts every {span:.0f} s; the run before copies on until it "
                f"hands over to it (at most {handover_of(flow):.0f} s more), so two runs "
                "overlap at each turn.")
    return ("Each run: **cycle** (heartbeat, sync of topics, partitions, configs and ACLs, "
            "exact ranges planned, then, when idle or on a warm Spark Connect server, the "
            "copy, record and checkpoints) →\n**copy** (spark-submit copy job) → "
            "**finish** (record, checkpoints), both skipped when `cycle` did it all.")


def _cycle(path: str, name: str) -> Cycle:
    """This DAG run's cycle (`ferry.steps.cycle`): the steps `ferry mirror` runs too, with
    the Airflow run id (made safe for file names) tagging what they record."""
    from airflow.sdk import get_current_context

    from ferry.steps.cycle import Cycle

    config = task_config(path, name)
    return Cycle(config, config.flow(name), file_safe(str(get_current_context()["run_id"])),
                 spark_master())


def _push(key: str, value: Any) -> None:
    from airflow.sdk import get_current_context

    get_current_context()["ti"].xcom_push(key=key, value=value)


def cycle(path: str, name: str) -> str | None:
    """Heartbeat, sync and plan; then, for an idle plan or a warm Spark, the copy, record
    and checkpoints too, and no task follows (None). With a copy for spark-submit, the
    task to follow: `copy` (the `plan` XCom then carries its plan file, jars and library
    zip). A failed copy through Connect fails the task: its retry runs a new cycle, which
    resumes from what was committed."""
    from ferry.errors import TransientError

    with task_edge():
        run = _cycle(path, name)  # its master is the warm one, when there is one
        result = run.start()
        planned = result.planned
        assert planned is not None
        if planned.plan_path is not None and not run.copies_in_process:
            _push("plan", planned.summary() | {"plan_path": planned.plan_path,
                                               **spark_job_files(spark_master())})
            _push("summary", result.steps())
            return "copy"
        if not run.copy(result, path):
            where = "this task" if run.copies_with == "local" else run.master
            raise TransientError(f"the copy job through {where} failed (exit "
                                 f"{result.copy_exit_code}): its lines are above; nothing past "
                                 "the last commit was kept, so a retry resumes there")
        _push("plan", planned.summary())
        _push("summary", run.finish(result).steps())
        _mirrored(run, result.recorded)
        return None


def finish(path: str, name: str) -> dict[str, Any]:
    """After `copy`: the run as recorded (the last attempt at each range), a lag-history
    point, and the flow's groups translated (checkpoints, and group offsets on the target
    with sync.group.offsets.enabled) when due."""
    from airflow.sdk import get_current_context

    with task_edge():
        adopt_class_archive(get_current_context()["ti"].xcom_pull(task_ids="cycle", key="plan"))
        run = _cycle(path, name)
        recorded = run.record(idle=False)
        _mirrored(run, recorded)
        return {"record": recorded, "checkpoints": run.checkpoints()}


def _mirrored(run: Cycle, recorded: dict[str, Any]) -> None:
    """The flow's Asset events: one per remote topic that received records in this run,
    now that the run is recorded (nothing for an idle run)."""
    from ferry.airflow.assets import emit

    emit(run.config, run.flow, run.run_id, recorded.get("topics", {}))


def mirror_continuously(path: str, name: str) -> dict[str, Any]:
    """Whole cycles back to back (one line each in the task's log) until the flow's next run
    takes over, or for `ferry.continuous.run.seconds` where runs do not overlap
    (`overlaps`); the first failed cycle fails the task (Airflow retries it), unless it
    failed as the run handed over. Sent SIGTERM (its run marked failed, its heartbeats
    failing), the loop ends after the cycle under way, leaving its Delta batch to the next
    run, and the task fails saying so. A retry says what became of the try before it."""
    import logging

    from airflow.sdk import get_current_context

    from ferry.airflow.assets import emit
    from ferry.core.tables import merge_copied
    from ferry.errors import TransientError
    from ferry.steps.cycle import CycleResult, run_continuously

    log = logging.getLogger("ferry.continuous")
    with task_edge():
        began = time.monotonic()
        config = task_config(path, name)
        flow = config.flow(name)
        span = run_span(flow.name, flow.ferry.continuous_run_seconds)
        context = get_current_context()
        owner, for_s = relay_of(context, span, handover_of(flow))
        if not overlaps(flow):  # one run at a time: each copies for its span
            for_s = span
        # where a run's start goes before its first cycle (the DAG file's parse is logged
        # by Airflow before this)
        log.info("cycles back to back %s, %.0fs at most (the config read in %.1fs)",
                 "until the next run takes over" if overlaps(flow) else "for the run's span",
                 for_s, time.monotonic() - began, extra={"flow": flow.name})
        if (attempt := int(getattr(context.get("ti"), "try_number", 1) or 1)) > 1:
            log.warning("try %d of this run: try %d did not finish (it failed, or its process "
                        "was ended); nothing it left uncommitted counts (Kafka fences a writer "
                        "of it still alive), and the copy goes on from the last commit",
                        attempt, attempt - 1, extra={"flow": flow.name})
        totals = {"cycles": 0, "copies": 0, "offsets": 0}
        topics: dict[str, dict[str, Any]] = {}

        def report(result: CycleResult, seconds: float) -> None:
            planned = result.planned
            copied = planned is not None and not planned.idle
            totals["cycles"] += 1
            totals["copies"] += int(copied)
            totals["offsets"] += planned.prepared.plan.span if planned and copied else 0
            merge_copied(topics, result.recorded.get("topics", {}))
            # where the cycle's time went: sync and plan, the copy, then record and
            # checkpoints (a slow run's turn or a saturated server shows here first)
            parts = ", ".join(f"{part} {taken:.1f}s" for part, taken in result.timings.items())
            log.info("cycle %s: %s in %.1fs%s", result.run_id,
                     f"{planned.prepared.plan.span:,} offsets copied" if planned and copied
                     else "idle", seconds, f" ({parts})" if parts else "",
                     extra={"flow": flow.name})

        with sigterm_noted() as signalled:
            last = run_continuously(path, config, flow, report,
                                    master=spark_master() or flow.ferry.spark_master,
                                    for_s=for_s, hand_over=True, owner=owner,
                                    stop=lambda: bool(signalled))
        if signalled:
            raise TransientError(
                f"flow {flow.name}: stopped by Airflow (SIGTERM: the run was marked failed or "
                "done, or the task's heartbeats failed) after cycle "
                f"{last.run_id if last else '(none)'}; nothing past its last commit was kept, "
                "and the next run records its last batch and copies on from there")
        if last is not None and not last.ok and last.handed_to is None:
            raise TransientError(f"flow {flow.name}: cycle {last.run_id}'s copy failed (exit "
                                 f"{last.copy_exit_code}); nothing past its last commit was "
                                 "kept, so a retry resumes there")
        emit(config, flow, file_safe(str(context["run_id"])), topics)
        return totals | {"handed_to": last.handed_to if last else None}


def relay_of(context: Any, span: float, handover: float) -> tuple[Named, float]:
    """The continuous run of this task's DAG run, as its lanes name it the flow's newest
    (its place: the run's `run_after`, a scheduled run's time or a manual one's trigger),
    and how long it copies at most (`ferry.core.spans.run_end`)."""
    now = time.time()
    after = getattr(context.get("dag_run"), "run_after", None)
    since = after.timestamp() if after is not None else now
    return (Named(str(context["run_id"]), int(since * 1000)),
            max(0.0, run_end(since, span, handover, now) - now))


def build_dag(flow: Flow, path: str) -> Any:
    if flow.ferry.schedule == "@continuous":
        return _continuous_dag(flow, path)
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG, task

    from ferry.spark.submit import job_arguments

    with DAG(
        dag_id=flow.dag_id,
        schedule=schedule_of(flow),
        start_date=datetime(2024, 1, 1),
        catchup=False,
        max_active_runs=1,
        tags=["ferry", f"source:{flow.source}", f"target:{flow.target}", *team_tags([flow])],
        doc_md=doc_md(flow, path),
        default_args=task_defaults(flow),
    ) as dag:
        timeout = timedelta(seconds=flow.ferry.copy_timeout_seconds)
        # `cycle` plans, and on a Spark Connect server also copies and records: one cycle's
        # limit, or the copy's when that is longer. `finish` records: one cycle's limit.
        one_cycle = timedelta(seconds=flow.ferry.cycle_timeout_seconds)
        # A run is one task process when it can be (see the module's docstring); each
        # costs seconds under a scheduler.
        whole: Callable[..., Any] = task.branch(task_id="cycle",
                                                execution_timeout=max(timeout, one_cycle),
                                                outlets=outlets(flow))(cycle)
        copy_job = SparkSubmitOperator(
            task_id="copy",
            application_args=job_arguments(
                path, flow.name, "{{ ti.xcom_pull(task_ids='cycle', key='plan')['plan_path'] }}"),
            name=f"ferry-copy {flow.name}",
            retries=flow.ferry.copy_retries,
            # A hung copy must not hold the flow (max_active_runs=1) for ever; lanes also
            # fail on their own when a partition makes no progress for 120 s.
            execution_timeout=timeout,
            **copy_job_settings("cycle", key="plan"),
        )
        finished = task(task_id="finish", execution_timeout=one_cycle, outlets=outlets(flow))(
            finish)(path, flow.name)
        whole(path, flow.name) >> copy_job >> finished
    return dag


def task_defaults(flow: Flow) -> dict[str, Any]:
    """Every task's retries, retry delay, pool and queue, from the flow's `ferry.task.*`
    settings (Airflow's own defaults where a pool or queue is not set), and the team's owner
    and failure callback (`ferry.dag.*`)."""
    defaults: dict[str, Any] = {
        "retries": flow.ferry.task_retries,
        "retry_delay": timedelta(seconds=flow.ferry.task_retry_delay_seconds)}
    if flow.ferry.task_pool:
        defaults["pool"] = flow.ferry.task_pool
    if flow.ferry.task_queue:
        defaults["queue"] = flow.ferry.task_queue
    return defaults | team_args([flow])


def _continuous_dag(flow: Flow, path: str) -> Any:
    """`ferry.schedule=@continuous`: one task running cycles back to back. Airflow starts a
    run every span of the flow, and the run before hands over to it (see the module's
    docstring): two runs at once at most, and Kafka fences the older one's writers."""
    from airflow.sdk import DAG, task

    span = run_span(flow.name, flow.ferry.continuous_run_seconds)
    with DAG(
        dag_id=flow.dag_id,
        # not Airflow's @continuous, which starts the next run only once one has ended
        schedule=timedelta(seconds=round(span)) if overlaps(flow) else "@continuous",
        start_date=datetime(2024, 1, 1),
        catchup=False,
        max_active_runs=2 if overlaps(flow) else 1,  # a run, and the next it hands over to
        tags=["ferry", f"source:{flow.source}", f"target:{flow.target}", "continuous",
              *team_tags([flow])],
        doc_md=doc_md(flow, path),
        default_args=task_defaults(flow),
    ) as dag:
        # the last cycle starts before the run's end (its span, the hand-over) and is
        # abandoned after the cycle limit at the latest; a minute more for the run's own
        # start and end
        task(task_id="mirror_continuously", outlets=outlets(flow), execution_timeout=timedelta(
            seconds=longest_span(flow.ferry.continuous_run_seconds) + handover_of(flow)
            + flow.ferry.cycle_timeout_seconds + 60))(mirror_continuously)(path, flow.name)
    return dag


def overlaps(flow: Flow) -> bool:
    """Whether the flow's @continuous runs overlap at a turn: only where Kafka fences the
    run before (`exactly_once`). An `at_least_once` writer has no transaction to fence, so
    a run beside it could double records at every turn: its runs keep Airflow's
    `@continuous` schedule, one at a time, each ending at its span."""
    return flow.ferry.delivery == "exactly_once"


def handover_of(flow: Flow) -> float:
    """How long a run of the flow copies on past its span for the next to take over."""
    return flow.ferry.continuous_handover_seconds if overlaps(flow) else 0.0

"""A flow's DAG under a real Airflow scheduler (the tier's scheduler, dag-processor and
api-server, `conftest.py`, not dag.test()): what only the scheduler and the task supervisor
do, the copy task's execution_timeout and its retries, against real brokers, Spark and
Delta, through three flows of the tier's config that only this module uses (`standalone`).

The timeout test's run is triggered as soon as the module starts (`short_timeout_run`) and
spends much of its time in the scheduler's wait before its retry (`airflow_stack.RETRY_DELAY_S`),
so it runs beside the retry test's Spark jobs, and the timeout test, last, finds it
finished."""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from ferry.core.tables import StatePaths
from ferry.state.reader import rows
from tests.scheduler.conftest import Standalone
from tests.scheduler.stack import TaskTry, processes_left, wait_for
from tests.support.kafka_data import assert_exact, create_topic, produce, read_all

pytestmark = pytest.mark.integration

RUN_S = 600
"""The longest a run may take here: two mirror attempts `airflow_stack.RETRY_DELAY_S` apart (the
DAG's retry_delay), each a spark-submit, on a small machine shared with other test runs (on
CI's, one spark-submit copy took five minutes to start its lanes). The module's tests have
`conftest.LONG_TIMEOUT_S`."""

ENDED = ("success", "failed", "upstream_failed", "skipped")
"""Task states after which no retry comes."""

TASK_API_TIMEOUT_S = 5.0
"""How long a task's supervisor waits for an answer of the execution API before it asks
again (Airflow's `[workers] execution_api_timeout`); a `ti_run` asked again is refused."""


def set_record_limit(bootstrap: str, topic: str, limit: int) -> None:
    """Set the topic's max.message.bytes on its cluster."""
    entry = ConfigEntry("max.message.bytes", str(limit),
                        incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


@pytest.fixture(scope="module", autouse=True)
def short_timeout_run(standalone: Standalone, clusters: dict[str, str]) -> str:
    """The given and when of the timeout test (see the module's docstring); the run id."""
    # given: a flow whose copy task may run 2 s (ferry.copy.timeout.seconds), less than
    # spark-submit needs to start, with records to copy
    flow = standalone.short_timeout
    create_topic(clusters["source"], flow.topic, 1)
    produce(clusters["source"], flow.topic, [(None, f"v{i}".encode(), 0) for i in range(10)])
    # when: the scheduler runs the flow's DAG
    return standalone.trigger(flow.dag_id)


def test_a_mirror_retried_after_the_target_refused_its_records_is_recorded_by_its_final_attempt(
    standalone: Standalone, clusters: dict[str, str]
) -> None:
    # given: a flow whose remote topic exists already, refusing records over 1,000 bytes,
    # and 24 source records of 2,000 bytes; topic-config sync is off for this flow, so the
    # limit stays
    flow = standalone.unsynced_configs
    create_topic(clusters["source"], flow.topic, 2)
    produce(clusters["source"], flow.topic,
            [(f"k{i}".encode(), bytes([65 + i]) * 2_000, i % 2) for i in range(24)])
    remote = flow.flow.remote_topic(flow.topic)
    create_topic(clusters["target"], remote, 2, {"max.message.bytes": "1000"})

    # when: the scheduler runs the flow's DAG; its first mirror attempt fails on the refusal
    run_id = standalone.trigger(flow.dag_id)

    def mirror_waits_for_its_retry() -> bool | None:
        mirror = standalone.tasks(flow.dag_id, run_id)["copy"]
        assert mirror.state not in ENDED, f"mirror ended {mirror.state} without a retry"
        return True if mirror.state == "up_for_retry" else None

    # (asked often: the retry comes `airflow_stack.RETRY_DELAY_S` after the failed attempt)
    wait_for("mirror to wait for its retry", RUN_S, mirror_waits_for_its_retry, every=0.5)
    # and while the scheduler waits to retry it, the target takes records that large again
    set_record_limit(clusters["target"], remote, 1_048_588)
    state = standalone.finished(flow.dag_id, run_id, RUN_S)

    # then: the first attempt failed on the refusal and recorded its ranges as failed
    first = standalone.task_log(flow.dag_id, run_id, "copy", 1)
    assert f"refused the record of {flow.topic}-" in first, first
    planned = standalone.xcom(flow.dag_id, run_id, "cycle", key="plan")
    recorded = rows(StatePaths(flow.flow.ferry.state_dir).runs, flow.flow.name,
                    run_id=planned["run_id"])
    assert sorted((r["partition"], r["outcome"]) for r in recorded) == [
        (0, "copied"), (0, "failed"), (1, "copied"), (1, "failed")]
    # the run succeeded on the retry, and `finish` reports that final attempt only
    tasks = standalone.tasks(flow.dag_id, run_id)
    assert state == "success", tasks
    assert tasks["copy"] == TaskTry("success", 2)
    summary = standalone.xcom(flow.dag_id, run_id, "finish")["record"]
    assert summary["failed"] == [] and summary["records"] == 24, summary
    # and the remote topic holds every record once, in order, as the offset map says
    assert_exact(flow.flow, clusters, flow.topic, 2)


def test_a_copy_task_past_its_timeout_is_stopped_with_its_spark_job_and_fails_after_its_retry(
    standalone: Standalone, clusters: dict[str, str], short_timeout_run: str
) -> None:
    # given, when: `short_timeout_run`, a run of a flow whose copy task may run 2 s
    flow, run_id = standalone.short_timeout, short_timeout_run
    state = standalone.finished(flow.dag_id, run_id, RUN_S)

    # then: the run failed at mirror, once its retry (retries=1) timed out too; nothing
    # after it ran
    tasks = standalone.tasks(flow.dag_id, run_id)
    assert state == "failed", tasks
    assert tasks["cycle"] == TaskTry("success", 1)
    assert tasks["copy"] == TaskTry("failed", 2)
    assert tasks["finish"].state == "upstream_failed"
    # each attempt was stopped by its timeout, and killed its spark-submit
    for attempt in (1, 2):
        log = standalone.task_log(flow.dag_id, run_id, "copy", attempt)
        assert "AirflowTaskTimeout" in log and "Process timed out" in log, log
        assert "Sending kill signal to spark-submit" in log, log
    # and the copy job never went on without it: nothing copied, no runs recorded, and no
    # process of it left, neither spark-submit's JVM nor a Python driver it started (their
    # command lines name the run's plan)
    planned = standalone.xcom(flow.dag_id, run_id, "cycle", key="plan")
    assert read_all(clusters["target"], flow.flow.remote_topic(flow.topic), 0) == []
    assert rows(StatePaths(flow.flow.ferry.state_dir).runs, flow.flow.name,
                run_id=planned["run_id"]) == []
    assert processes_left(planned["plan_path"], timeout=30) == []


def test_ferrys_lines_reach_the_task_log_at_their_own_level(
    standalone: Standalone, short_timeout_run: str
) -> None:
    # given: the timeout test's run, whose `cycle` task succeeded (it planned the copy)
    flow, run_id = standalone.short_timeout, short_timeout_run
    standalone.finished(flow.dag_id, run_id, RUN_S)

    # when: reading that task's log as Airflow stores it
    entries = [e for e in standalone.task_log_entries(flow.dag_id, run_id, "cycle", 1)
               if isinstance(e, dict)]

    # then: Ferry's INFO lines are entries of their own logger at level info, with their
    # context; nothing is at error (stderr lines would be, as Airflow forwards them so)
    planned = [e for e in entries if str(e.get("event", "")).startswith("planned ")]
    assert planned, entries
    assert all((e.get("level"), e.get("logger")) == ("info", "ferry.steps.plan")
               for e in planned), planned
    assert all(f"[flow={flow.flow.name}]" in str(e["event"]) for e in planned), planned
    assert [e for e in entries if e.get("level") in ("error", "critical")] == []


def test_an_audited_call_waiting_for_sqlites_lock_stalls_the_server_less_than_a_tasks_timeout(
    standalone: Standalone,
) -> None:
    # given: another process holds SQLite's write lock for 8 s, as a starting task's `ti_run`
    # does until the api-server's event loop lets it commit (tests/scheduler/sqlite.py)
    flow = standalone.unsynced_configs
    held, hold_s = threading.Event(), 8.0
    waits: list[float] = []

    def hold_the_lock() -> None:
        holder = sqlite3.connect(standalone.home / "airflow.db", timeout=60,
                                 isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            held.set()
            time.sleep(hold_s)
            holder.execute("COMMIT")
        finally:
            holder.close()

    def ask_health_while_held() -> None:
        until = time.monotonic() + hold_s
        while time.monotonic() < until:
            asked = time.monotonic()
            with urllib.request.urlopen(f"{standalone.url}/api/v2/monitor/health", timeout=60):
                waits.append(time.monotonic() - asked)
            time.sleep(0.25)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert held.wait(60), "SQLite's write lock was not taken"
    prober = threading.Thread(target=ask_health_while_held)
    prober.start()

    # when: an audited call (a DAG's pause flag: its audit log is written on the event loop)
    # is made while it is held, and the server's health is asked all along
    answer = standalone.api("PATCH", f"/dags/{flow.dag_id}", {"is_paused": False})
    prober.join()
    holder.join()

    # then: the call waited for the lock and was refused (it wrote nothing), and went through
    # when asked again
    refused = [line for line in (standalone.home / "api-server.log").read_text().splitlines()
               if f"method=PATCH path=/api/v2/dags/{flow.dag_id} " in line
               and "status_code=500" in line]
    assert refused, "the call never waited for SQLite's lock"
    assert answer["dag_id"] == flow.dag_id and answer["is_paused"] is False
    # and meanwhile the server answered within a task's API timeout, every time
    assert waits and max(waits) < TASK_API_TIMEOUT_S, waits


def test_a_continuous_flows_runs_overlap_and_each_hands_over_to_the_next(
    standalone: Standalone, clusters: dict[str, str]
) -> None:
    # given: an @continuous flow whose runs start RELAY_SPAN_S apart, its topic idle (its
    # cycles start no Spark job; what a hand-over does to records is
    # tests/integration/test_handover.py)
    flow = standalone.relay
    create_topic(clusters["source"], flow.topic, 1)

    # when: the scheduler runs the flow's DAG until two of its runs have ended
    standalone.api("PATCH", f"/dags/{flow.dag_id}", {"is_paused": False})
    try:
        wait_for("two runs of the continuous DAG to end", RUN_S, lambda: True if sum(
            r["state"] == "success" for r in standalone.runs(flow.dag_id)) >= 2 else None,
            every=1.0)
        found = standalone.runs(flow.dag_id)
    finally:
        # the runs still going would copy on for RELAY_HANDOVER_S with nobody to hand
        # over to: ended as an operator would
        standalone.stop_dag(flow.dag_id, RUN_S)

    # then: each run that ended did so successfully, after the next run had started, and
    # handed over to it (the next one named itself the flow's newest after its first cycle)
    ended = [r for r in found if r["state"] not in ("running", "queued")]
    assert ended and all(r["state"] == "success" for r in ended), found
    for before, after in itertools.pairwise(found):
        if before["state"] != "success":
            continue
        assert after["start_date"] is not None and after["start_date"] < before["end_date"], \
            (before, after)
        summary = standalone.xcom(flow.dag_id, before["dag_run_id"], "mirror_continuously")
        assert summary["handed_to"] == after["dag_run_id"], summary
        log = standalone.task_log(flow.dag_id, before["dag_run_id"], "mirror_continuously", 1)
        assert f"continuous run {after['dag_run_id']} of the flow, later than this one" in log

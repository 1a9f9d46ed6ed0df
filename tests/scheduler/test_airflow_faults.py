"""Airflow's own parts failing under a continuous flow (the tier's scheduler, dag-processor
and api-server, `conftest.py`), against real brokers: the copy task's process and its
supervisor SIGKILLed (Airflow finds a zombie and retries the task), the run marked failed
from the REST API (the task is sent SIGTERM), the api-server the tasks heartbeat through
stopped for a minute, the scheduler SIGKILLed and started again. The flow is the tier's
`faults` (`@continuous`, runs `airflow_stack.FAULTS_SPAN_S` apart, each handing over to
the next), copying a live stream (`tests.support.stream.Feeder`) as each fault strikes.

Each test: the fault strikes while the flow's newest run copies; the flow carries on
without a human, caught up within `RECOVERY_S` of the fault's end; the task log says what
happened (the killed try's retry, which comes only once Airflow takes it for a zombie, is
checked by the last test); and once the stream stops, every record is on the target once
and in order, as the offset map says. The stream goes on from test to test into the one
topic, so each test checks all that every fault before it left too."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil  # type: ignore[import-untyped]  # an Airflow dependency, without type hints
import pytest

from tests.scheduler.stack import Airflow, wait_for
from tests.support.airflow_stack import HEARTBEAT_TIMEOUT_S, FlowUnderTest, Stack
from tests.support.kafka_data import assert_exact, create_topic
from tests.support.stream import Feeder, caught_up, ends, lag

pytestmark = pytest.mark.integration

PARTITIONS = 4
RATE = 50
"""Records a second the source receives while a fault strikes."""
RECOVERY_S = 120.0
"""How soon after a fault's end the flow must have copied what the source held then: a new
run's task starts (the next run of the schedule, or a retry) and its first cycle copies,
on a machine the suite's other workers load."""
RUN_S = 600.0
TASK = "mirror_continuously"


@dataclass(frozen=True)
class LiveTry:
    """The task try of the flow's newest running run, copying."""

    run_id: str
    try_number: int
    pid: int
    """The task's process (its supervisor is the parent)."""


class Faulted(Airflow):
    """test_airflow_faults' view of the stack: its flow, the flow's one topic, the
    components."""

    def __init__(self, stack: Stack, topic: str) -> None:
        super().__init__(stack.url)
        self.flow, self.topic = stack.flows["faults"], topic
        self.components = stack.components
        self.killed: list[LiveTry] = []
        """The try the first test SIGKILLed (the last test checks its retry)."""

    @property
    def dag_id(self) -> str:
        return self.flow.dag_id

    def task_try(self, run_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/dags/{self.dag_id}/dagRuns/{run_id}/taskInstances/{TASK}"))

    def live(self) -> LiveTry | None:
        """The newest running run's task try, once it is the only run copying (the run
        before handed over) and its process is known; None before."""
        running = [r for r in self.runs(self.dag_id) if r["state"] == "running"]
        if len(running) != 1:
            return None
        ti = self.task_try(running[0]["dag_run_id"])
        if ti["state"] != "running" or not ti.get("pid"):
            return None
        return LiveTry(running[0]["dag_run_id"], int(ti["try_number"]), int(ti["pid"]))

    def log(self, run_id: str, try_number: int) -> str:
        return self.task_log(self.dag_id, run_id, TASK, try_number)

    def taken_over(self) -> LiveTry:
        """The try of a run that has just taken over from the run before it, so that a fault
        strikes with most of `FAULTS_SPAN_S` ahead of the run: a run marked failed or killed
        as it hands over to the next one ends by itself first, and its log says nothing of
        the fault (seen under load, the strike and the hand-over within 2 s)."""
        before = wait_for("a run copying", RUN_S, self.live)
        return wait_for("the next run to take over", RUN_S, lambda: (
            found if (found := self.live()) is not None and found.run_id != before.run_id
            else None), every=0.2)


def gone(pid: int) -> bool | None:
    """True once the process `pid` has exited."""
    try:
        return True if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE else None
    except psutil.NoSuchProcess:
        return True


def lines_of(log: str, *words: str) -> str:
    """The lines of `log` naming any of `words`, for a test's output."""
    return "\n".join(line[:400] for line in log.splitlines()
                     if any(w.lower() in line.lower() for w in words))


def copies_to(clusters: dict[str, str], flow: FlowUnderTest, within: float,
              what: str) -> float:
    """Wait until the flow has copied what the source holds now; the seconds it took."""
    mark, began = ends(clusters["source"], flow.topic, PARTITIONS), time.monotonic()
    wait_for(f"the flow to copy {what}", within, lambda: True if lag(
        clusters, flow.flow, flow.topic, PARTITIONS, mark) == 0 else None, every=0.5)
    return time.monotonic() - began


@pytest.fixture(scope="module")
def faulted(airflow_stack: Stack, clusters: dict[str, str]) -> Iterator[Faulted]:
    """The flow's DAG unpaused over an idle topic, its first run copying; paused at the end,
    its runs still going marked failed (as an operator ends them), and the stack's
    components all running again (the tier's other modules use them)."""
    flow = airflow_stack.flows["faults"]
    create_topic(clusters["source"], flow.topic, PARTITIONS)
    view = Faulted(airflow_stack, flow.topic)
    view.api("PATCH", f"/dags/{view.dag_id}", {"is_paused": False})
    try:
        wait_for("the flow's first run to copy", RUN_S, view.live)
        yield view
    finally:
        for name in ("api-server", "scheduler"):
            if view.components.named(name).process.poll() is not None:
                view.components.start(name)
        wait_for("the api-server to answer", 120, lambda: _answers(view))
        view.stop_dag(view.dag_id, RUN_S)


def _answers(view: Airflow) -> bool | None:
    with contextlib.suppress(OSError, AssertionError):
        view.api("GET", "/monitor/health")
        return True
    return None


@contextlib.contextmanager
def streaming(view: Faulted, clusters: dict[str, str]) -> Iterator[Feeder]:
    """The stream on while the block runs, the flow's newest run copying it at the start;
    after it, the stream stopped, the flow caught up, and every record exact."""
    with Feeder(clusters["source"], view.topic, rate=RATE, partitions=PARTITIONS) as feeder:
        wait_for("a run of the flow to copy the stream", RUN_S, view.live)
        copies_to(clusters, view.flow, RUN_S, "the stream's start")
        yield feeder
    wait_for("the flow to catch up once the stream stopped", RUN_S, lambda: True if caught_up(
        clusters, view.flow.flow, view.topic, PARTITIONS)() else None, every=0.5)
    assert_exact(view.flow.flow, clusters, view.topic, PARTITIONS)


def test_a_copy_task_killed_with_its_supervisor_leaves_the_next_run_to_copy_on(
    faulted: Faulted, clusters: dict[str, str]
) -> None:
    with streaming(faulted, clusters):
        # given: the flow's newest run copying the stream, just taken over
        live = faulted.taken_over()
        supervisor = psutil.Process(live.pid).parent()

        # when: its task process and the supervisor above it are SIGKILLed, as an
        # out-of-memory kill of the worker would (no heartbeat, no final state)
        os.kill(supervisor.pid, signal.SIGKILL)
        os.kill(live.pid, signal.SIGKILL)
        wait_for("the task's process to end", 30, lambda: gone(live.pid))

        # then: the flow's next run copies on: caught up without a human
        taken = copies_to(clusters, faulted.flow, RECOVERY_S, "past the kill")
    print(f"caught up {taken:.1f}s after the kill")
    # (Airflow retries the killed try once it is taken for a zombie, HEARTBEAT_TIMEOUT_S
    # after its last heartbeat: the module's last test checks it, the other faults struck
    # meanwhile)
    faulted.killed.append(live)


def test_a_run_marked_failed_mid_copy_stops_its_loop_and_the_next_run_copies_on(
    faulted: Faulted, clusters: dict[str, str]
) -> None:
    with streaming(faulted, clusters):
        # given: the flow's newest run copying the stream, just taken over
        live = faulted.taken_over()

        # when: an operator marks the run failed (Airflow then sends its task SIGTERM)
        faulted.api("PATCH", f"/dags/{faulted.dag_id}/dagRuns/{live.run_id}",
                    {"state": "failed"})
        wait_for("the task's process to end", 60, lambda: gone(live.pid))

        # then: the flow's next run copies on
        taken = copies_to(clusters, faulted.flow, RECOVERY_S, "past the failed run")
        # and the task's log says that Airflow stopped it, and how the loop ended
        log = wait_for("the stopped try's log", 60, lambda: (
            text if "stopped by Airflow (SIGTERM" in (text := faulted.log(
                live.run_id, live.try_number)) else None))
        assert "Server indicated the task shouldn't be running anymore" in log, log
    print(f"caught up {taken:.1f}s after the run's task ended; its log:\n"
          + lines_of(log, "stopped", "sigterm", "terminat", "killed"))


def test_the_api_server_down_for_a_minute_mid_copy_costs_no_record_and_the_flow_carries_on(
    faulted: Faulted, clusters: dict[str, str]
) -> None:
    with streaming(faulted, clusters):
        # given: the flow's newest run copying the stream
        live = wait_for("a run copying", RUN_S, faulted.live)

        # when: the api-server the tasks report to stops for 60 s
        faulted.components.end("api-server", signal.SIGTERM)
        time.sleep(60)
        faulted.components.start("api-server")
        wait_for("the api-server to answer again", 120, lambda: _answers(faulted))

        # then: the flow carries on
        taken = copies_to(clusters, faulted.flow, RECOVERY_S, "past the outage")
        # and the try under way, when Airflow ended it (its supervisor after 3 failed
        # heartbeats, `[workers] max_failed_heartbeats`, their retries a random minute or
        # so; or, once the api-server was back, because the scheduler had taken it for a
        # zombie meanwhile), says it was stopped, and how; a try Airflow let live through
        # the outage copied on
        after = faulted.task_try(live.run_id)
        log = faulted.log(live.run_id, live.try_number)
        if (after["try_number"], after["state"]) != (live.try_number, "running"):
            # (a try ended by the scheduler is sent SIGTERM at its next heartbeat)
            log = wait_for("the stopped try to say so", 60, lambda: (
                text if "stopped by Airflow (SIGTERM" in (text := faulted.log(
                    live.run_id, live.try_number)) else None))
    print(f"caught up {taken:.1f}s after the api-server's return; the try then: "
          f"{after['try_number']} {after['state']}; its log:\n"
          + lines_of(log, "heartbeat", "stopped", "sigterm", "terminat", "killed"))


def test_the_scheduler_killed_mid_copy_leaves_the_copy_going_and_picks_up_on_its_restart(
    faulted: Faulted, clusters: dict[str, str]
) -> None:
    with streaming(faulted, clusters):
        # given: the flow's newest run copying the stream
        live = wait_for("a run copying", RUN_S, faulted.live)
        workers = psutil.Process(faulted.components.named("scheduler").process.pid
                                 ).children(recursive=False)

        try:
            # when: the scheduler is SIGKILLed (its executor's workers live on, orphaned)
            faulted.components.end("scheduler", signal.SIGKILL)
            # then: while it is down, the run under way copies on
            copies_to(clusters, faulted.flow, RECOVERY_S, "while the scheduler is down")

            # when: it is started again
            started = time.time()
            faulted.components.start("scheduler")

            # then: the flow carries on, and the scheduler starts its runs again
            taken = copies_to(clusters, faulted.flow, RECOVERY_S, "past the restart")
            wait_for("a run started after the restart", RUN_S, lambda: True if any(
                r["start_date"] and _epoch(r["start_date"]) > started
                for r in faulted.runs(faulted.dag_id)) else None)
        finally:
            # the orphaned workers wait for a scheduler that is gone: ended here
            for worker in workers:
                with contextlib.suppress(psutil.NoSuchProcess):
                    worker.kill()
    log = faulted.log(live.run_id, live.try_number)
    print(f"caught up {taken:.1f}s after the scheduler's restart; the try then: "
          f"{faulted.task_try(live.run_id)}; its log:\n"
          + lines_of(log, "heartbeat", "stopped", "sigterm", "terminat", "killed", "hands over"))


def test_the_killed_copy_tasks_retry_took_it_for_a_zombie_and_handed_over_at_once(
    faulted: Faulted
) -> None:
    # given: the try SIGKILLed with its supervisor by the module's first test
    assert faulted.killed, "the first test killed no try"
    (live,) = faulted.killed

    # then: Airflow took the try for a zombie once its heartbeats stopped, and retried it;
    # the retry, of a run earlier than the one copying by then, handed over at once
    ended = wait_for("the killed try's retry to end", HEARTBEAT_TIMEOUT_S + RUN_S, lambda: (
        ti if (ti := faulted.task_try(live.run_id))["try_number"] > live.try_number
        and ti["state"] in ("success", "failed") else None))
    retry = faulted.log(live.run_id, live.try_number + 1)
    assert f"try {live.try_number + 1} of this run: try {live.try_number} did not finish" \
        in retry, retry
    assert "hands over to it and ends" in retry, retry
    assert ended["state"] == "success", ended
    print("the retry's log:\n" + lines_of(retry, "ferry.", "heartbeat"))


def _epoch(when: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()

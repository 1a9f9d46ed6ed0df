"""A continuous loop's runtime (`ferry.runtime.loop.Loop`): each flow's recorder and kept
lanes made once and closed with the loop, a recorder's first batch only after the first
cycle, the local runner asking Spark nothing, and what the Spark runner keeps closed last.
On real brokers: tests/integration/test_kept_lanes.py and test_recording_behind.py."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.config import Flow
from ferry.core.plan_file import PlanFile
from ferry.runtime import local
from ferry.runtime.job import JobResult
from ferry.runtime.loop import Loop
from ferry.runtime.recorder import Recorder
from tests.unit.conftest import BASE, Loader


@pytest.fixture
def flow(load: Loader) -> Flow:
    return load(BASE + "ferry.state.record.interval.seconds = 3600\n").flow("A->B")


class Told:
    """A recorder that only says what it was told."""

    def __init__(self, events: list[tuple[str, object]]) -> None:
        self.events = events

    def end_at(self, when: float | None) -> None:
        self.events.append(("end_at", when))

    def close(self, _timeout_s: float | None = None, hand_over: bool = False) -> None:
        self.events.append(("close", hand_over))


class Sessions:
    def __init__(self, events: list[tuple[str, object]]) -> None:
        self.events = events

    def close(self) -> None:
        self.events.append(("sessions closed", None))


def test_closing_the_loop_keeps_each_recorders_end_until_it_is_closed_then_closes_sessions(
) -> None:
    # a recorder told of no end before its close starts at once the batch that a hand-over
    # leaves to the next run (its interval long passed): the close then waited for it
    events: list[tuple[str, object]] = []
    loop = Loop(sessions=Sessions(events))
    loop._recorders["A->B"] = Told(events)  # type: ignore[assignment]
    loop.end_at(100.0)

    loop.close(hand_over=True)

    assert events == [("end_at", 100.0), ("close", True), ("sessions closed", None)]
    assert loop._ends_at is None  # a later loop of the runtime starts with no end


def test_a_flows_recorder_is_made_before_its_first_cycle_and_batches_only_after_it(
    monkeypatch: pytest.MonkeyPatch, flow: Flow
) -> None:
    written: list[int] = []
    monkeypatch.setattr(Recorder, "_record", lambda _self, rows: written.append(len(rows)))
    loop: Loop[Any] = Loop()

    loop.prepare(flow)

    assert loop.records_behind(flow.name)  # the first plan reads no lag
    recorder = loop._recorders[flow.name]
    recorder.flush(timeout_s=10)
    assert written == []  # no batch beside the first cycle: it would slow that cycle
    loop.started(flow)  # the first cycle is done
    recorder.flush(timeout_s=10)
    assert written == [0]  # the catch-up batch: earlier runs' rows from the offset-map topic
    loop.close()
    assert not loop._recorders


@pytest.mark.parametrize(("settings", "kept", "behind"), [
    ("", True, True),
    ("ferry.delivery = at_least_once\n", False, True),
    ("ferry.state.record.interval.seconds = 0\n", True, False),
], ids=["exactly-once", "at-least-once-claims-anew", "recorded-every-cycle"])
def test_a_loops_local_runner_keeps_lanes_for_exactly_once_and_records_behind_unless_told(
    load: Loader, settings: str, kept: bool, behind: bool
) -> None:
    flow = load(BASE + "ferry.state.record.interval.seconds = 3600\n" + settings).flow("A->B")
    loop: Loop[Any] = Loop()

    first, second = loop.runner(flow), loop.runner(flow)

    assert (first.lanes is not None) is kept and first.lanes is second.lanes
    assert (first.recorder is not None) is behind and first.recorder is second.recorder
    loop.close()


def test_the_local_runner_in_a_loop_hands_its_rows_to_the_recorder_and_asks_spark_nothing(
    monkeypatch: pytest.MonkeyPatch, flow: Flow
) -> None:
    from ferry.spark import connect

    def remote_session(url: str) -> object:
        raise AssertionError(f"a session to {url} was opened")

    written: list[list[str]] = []
    jobs: list[str] = []

    def copy_plan(plan: PlanFile, _flow: Flow, lanes: object, *, append: object,
                  recorder: Any) -> JobResult:
        jobs.append(plan.run_id)
        recorder.begin(plan.run_id)
        recorder.add(plan.run_id, [{"run_id": plan.run_id, "outcome": "copied"}])
        return JobResult({"run_id": plan.run_id, "records": 1, "ranges": 1}, [], [], None, ())

    monkeypatch.setattr(connect, "remote_session", remote_session)
    monkeypatch.setattr(local, "copy_plan", copy_plan)
    monkeypatch.setattr(Recorder, "_record",
                        lambda _self, rows: written.append([r["run_id"] for r in rows]))
    loop: Loop[Any] = Loop()
    loop.prepare(flow)

    for run_id in ("r1", "r2"):
        copied = loop.runner(flow).run(PlanFile(flow.name, run_id, 1, (), ()))
        assert copied.exit_code == 0
    loop.close()  # a stop: the last batch

    assert jobs == ["r1", "r2"]
    assert sorted(run for batch in written for run in batch) == ["r1", "r2"]


def test_a_loops_lanes_count_what_stuck_calls_leave_behind_in_that_loop_and_no_other(
    flow: Flow
) -> None:
    # the bound past which a loop exits is its own: two loops (or a test beside a loop)
    # never add up each other's threads
    one: Loop[Any] = Loop()
    other: Loop[Any] = Loop()

    lanes = one.runner(flow).lanes

    assert lanes is not None and lanes.left_behind is one.left_behind
    assert one.left_behind is not other.left_behind
    one.close()
    other.close()

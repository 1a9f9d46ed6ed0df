"""Which sync steps run now: MM2's intervals, read for batch runs."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ferry.config import Flow, load_config
from ferry.core.sync.schedule import DUE, PACED, Pace, due_steps, interval_of

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def flow(tmp_path: Path, extra: str = "") -> Flow:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                    "A->B.enabled = true\n" + extra)
    return load_config(path).flow("A->B")


def test_default_intervals_sync_every_run(tmp_path: Path) -> None:
    recent = {s: NOW - timedelta(seconds=1) for s in ("topics", "configs", "acls")}
    assert due_steps(flow(tmp_path), recent, NOW) == {"topics": DUE, "configs": DUE,
                                                      "acls": DUE}


@pytest.mark.parametrize(
    ("ago", "due"), [(None, True), (59, False), (60, True), (3600, True)],
    ids=["never", "too-soon", "exactly", "long-ago"])
def test_an_explicit_interval_is_honoured(tmp_path: Path, ago: int | None, due: bool) -> None:
    f = flow(tmp_path, "sync.topic.configs.interval.seconds = 60\n")
    last = {} if ago is None else {"configs": NOW - timedelta(seconds=ago)}
    state = due_steps(f, last, NOW)["configs"]
    assert (state == DUE) is due
    if not due:
        assert "not due until 2026-11-26T12:00:01+00:00" in state
        assert "sync.topic.configs.interval.seconds=60" in state


def test_force_runs_every_enabled_step(tmp_path: Path) -> None:
    f = flow(tmp_path, "sync.topic.acls.interval.seconds = 600\n"
                       "sync.topic.configs.enabled = false\n")
    steps = due_steps(f, {"acls": NOW}, NOW, force=True)
    assert steps["acls"] == DUE
    assert steps["configs"] == "off (sync.topic.configs.enabled=false)"


@pytest.mark.parametrize(
    ("extra", "label"),
    [("sync.topic.acls.enabled = false\n", "sync.topic.acls.enabled=false"),
     ("sync.topic.acls.interval.seconds = -1\n", "sync.topic.acls.interval.seconds=-1")],
)
def test_a_step_that_is_off_never_runs(tmp_path: Path, extra: str, label: str) -> None:
    assert due_steps(flow(tmp_path, extra), {}, NOW)["acls"] == f"off ({label})"


def test_topics_are_created_once_even_with_refresh_off(tmp_path: Path) -> None:
    f = flow(tmp_path, "refresh.topics.enabled = false\n")
    assert due_steps(f, {}, NOW)["topics"] == DUE
    assert due_steps(f, {"topics": NOW}, NOW)["topics"].startswith("off")


@pytest.mark.parametrize(
    ("step", "extra", "ago", "due"),
    [
        ("heartbeats", "", None, True),
        ("heartbeats", "", 0.5, False),
        ("heartbeats", "", 1.0, True),
        ("configs", "", 599, False),
        ("configs", "", 600, True),
        ("acls", "sync.topic.acls.interval.seconds = 5\n", 5, True),
        ("checkpoints", "", 59, False),
        ("checkpoints", "emit.checkpoints.enabled = false\n", 1, True),
        ("lag", "", 59, False),
        ("lag", "", 60, True),
    ],
    ids=["first-cycle", "heartbeat-within-its-1s-default", "heartbeat-after-1s",
         "configs-within-mm2s-600s-default", "configs-after-600s", "an-interval-you-set",
         "checkpoints-within-their-60s-default", "an-inactive-step-says-why-itself",
         "a-lag-history-point-within-the-minute", "a-lag-history-point-a-minute-later"],
)
def test_a_long_running_loop_runs_each_paced_step_at_its_interval(
    tmp_path: Path, step: str, extra: str, ago: float | None, due: bool
) -> None:
    f = flow(tmp_path, extra)
    pace = Pace()
    if ago is not None:
        pace.ran(step, 1000.0)
    assert pace.due(step, interval_of(f, step), 1000.0 + (ago or 0)) is due


def test_topics_are_not_paced_so_a_new_topic_is_found_within_a_cycle() -> None:
    assert "topics" not in PACED
    assert set(PACED) == {"heartbeats", "configs", "acls", "checkpoints", "lag"}


@pytest.mark.parametrize(
    ("step", "extra", "first_due"),
    [("heartbeats", "", 0.0),  # every second, from the start
     ("configs", "", 5.0), ("acls", "", 10.0), ("checkpoints", "", 15.0), ("lag", "", 20.0),
     ("configs", "sync.topic.configs.interval.seconds = 2\n", 2.0),  # within its interval
     ("checkpoints", "emit.checkpoints.interval.seconds = 3600\n", 15.0)],
    ids=["heartbeats", "configs", "acls", "checkpoints", "lag", "short-interval",
         "long-interval"])
def test_a_loop_following_a_run_leaves_the_steps_that_move_no_record_to_later_cycles(
    tmp_path: Path, step: str, extra: str, first_due: float
) -> None:
    f = flow(tmp_path, extra)
    pace = Pace.following(f, 1000.0)
    interval = interval_of(f, step)
    if first_due:
        assert not pace.due(step, interval, 1000.0)  # not in the first cycle
        assert not pace.due(step, interval, 1000.0 + first_due - 0.1)
    assert pace.due(step, interval, 1000.0 + first_due)
    pace.ran(step, 1000.0 + first_due)  # then at its interval, as in any loop
    assert not pace.due(step, interval, 1000.0 + first_due + interval.seconds - 0.1)


def test_a_loop_following_a_run_takes_no_two_quiet_steps_in_one_cycle(tmp_path: Path) -> None:
    f = flow(tmp_path)
    pace = Pace.following(f, 0.0)
    firsts = sorted(next(t / 10 for t in range(1000) if pace.due(s, interval_of(f, s), t / 10))
                    for s in ("configs", "acls", "checkpoints", "lag"))
    assert all(later - earlier >= 4.0 for earlier, later in itertools.pairwise(firsts))

"""A wait on a cluster that goes unanswered is said once, naming the cluster, and its end
once, whatever the number of slices the wait polls in."""

from __future__ import annotations

import logging
import time

import pytest

from ferry.core.silence import Silence, Watch


class Clock:
    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self) -> float:
        return self.at


@pytest.mark.parametrize(("slices", "answered", "said"), [
    # (seconds, outstanding) per slice, whether it ended answered -> the lines said
    ([(1, 5), (5, 5), (9, 5), (12, 0)], True, []),              # answered before 10 s
    ([(1, 5), (6, 4), (14, 3), (22, 2), (30, 0)], True, []),    # slow, but moving
    ([(1, 5), (11, 5), (20, 5), (40, 5), (61, 0)], True,
     ["WARNING no answer for 10 s (5 outstanding)", "INFO answers again"]),
    ([(1, 5), (11, 5), (60, 0)], False,                          # timed out: the caller's
     ["WARNING no answer for 10 s (5 outstanding)"]),
])
def test_a_wait_without_progress_is_said_once_after_ten_seconds_and_its_answer_once(
    slices: list[tuple[float, int]], answered: bool, said: list[str],
    caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    silence = Silence(logging.getLogger("ferry.test"), "tgt", "writer 0's records",
                      now=clock)
    with caplog.at_level(logging.INFO, "ferry.test"):
        for at, outstanding in slices[:-1]:
            clock.at = at
            silence.saw(outstanding)
        clock.at = slices[-1][0]
        silence.ended(answered)

    lines = [f"{r.levelname} {r.getMessage()}" for r in caplog.records]
    assert len(lines) == len(said), lines
    for line, expected in zip(lines, said, strict=True):
        level, text = expected.split(" ", 1)
        assert line.startswith(level) and text in line and "cluster tgt" in line, line


def test_a_blocking_call_that_waits_is_said_once_by_the_watch_and_its_answer_once(
    caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    watch = Watch(every_s=0.01, now=clock)
    log = logging.getLogger("ferry.test")
    with caplog.at_level(logging.INFO, "ferry.test"):
        with watch.call(log, "tgt", "writer 0 committing the transaction"):
            time.sleep(0.1)  # watched, but answered at once: nothing said
        with watch.call(log, "tgt", "writer 0 committing the transaction"):
            time.sleep(0.1)
            clock.at = 11.0  # as if it waited 11 s
            time.sleep(0.1)

    lines = [f"{r.levelname} {r.getMessage()}" for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("WARNING cluster tgt: writer 0 committing the transaction: "
                               "no answer for 11 s: ")
    assert lines[1].startswith("INFO cluster tgt answers again: writer 0 committing")


def test_a_watch_runs_its_thread_only_while_a_call_is_watched() -> None:
    # one watch per writer: a writer that is done leaves no thread behind, however long
    # the loop it served runs on
    watch = Watch(every_s=0.01)
    assert not watch.watching
    with watch.call(logging.getLogger("ferry.test"), "tgt", "writer 0 committing"):
        assert watch.watching
    deadline = time.monotonic() + 5
    while watch.watching and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not watch.watching
    with watch.call(logging.getLogger("ferry.test"), "tgt", "writer 0 committing"):
        assert watch.watching  # and the next call starts one again

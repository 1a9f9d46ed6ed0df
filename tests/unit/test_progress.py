"""Progress lines: done/total, rate, ETA; throttled."""

from __future__ import annotations

import logging

import pytest

from ferry.progress import Progress, describe


@pytest.mark.parametrize(
    ("done", "total", "seconds", "text"),
    [(500, 1000, 5.0, "500/1,000 records (50%), 100 records/s, ETA 5s"),
     (1000, 1000, 4.0, "1,000/1,000 records (100%), 250 records/s, done"),
     (0, 10, 1.0, "0/10 records (0%), 0 records/s, ETA -")],
)
def test_describe(done: int, total: int, seconds: float, text: str) -> None:
    assert describe(done, total, seconds) == text


def test_progress_is_throttled_but_always_logs_completion(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    progress = Progress(logging.getLogger("t"), "lane 0", every=5, clock=lambda: now[0])
    with caplog.at_level(logging.INFO):
        now[0] = 1.0
        progress(10, 100)
        now[0] = 6.0
        progress(60, 100)
        now[0] = 7.0
        progress(100, 100)
    assert [r.getMessage() for r in caplog.records] == [
        "lane 0: 60/100 records (60%), 10 records/s, ETA 4s",
        "lane 0: 100/100 records (100%), 14 records/s, done"]


def test_zero_restarts_the_clock(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    progress = Progress(logging.getLogger("t"), "lane", every=5, clock=lambda: now[0])
    now[0] = 100.0
    progress(0, 10)  # copying starts only now
    now[0] = 102.0
    with caplog.at_level(logging.INFO):
        progress(10, 10)
    assert caplog.records[0].getMessage() == "lane: 10/10 records (100%), 5 records/s, done"

"""The Spark runner's sessions kept between a continuous loop's jobs
(`ferry.spark.connect.ConnectSessions`): opened beside the first cycle, handed to the first
job, closed with the loop; a spark-submit master keeps nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ferry.spark import connect
from tests.unit.conftest import BASE, Loader


class Session:
    stopped = 0

    class conf:  # the session's `conf`, which a kept session is asked
        @staticmethod
        def get(_key: str, default: str) -> str:
            return default

    def stop(self) -> None:
        Session.stopped += 1


def test_a_session_is_opened_beside_the_first_cycle_and_closed_with_the_loop(
    monkeypatch: pytest.MonkeyPatch, load: Loader
) -> None:
    flow = load(BASE).flow("A->B")
    opened: list[Session] = []

    def remote_session(_url: str) -> Session:
        time.sleep(0.2)  # the client's imports and the session
        opened.append(Session())
        return opened[-1]

    monkeypatch.setattr(connect, "remote_session", remote_session)
    sessions = connect.ConnectSessions()
    stopped = Session.stopped

    sessions.prepare("sc://here")
    sessions.prepare("local[2]")  # spark-submit: nothing to open

    session: Any = sessions._opened("sc://here", flow)  # what the first job takes
    assert session is opened[0] and len(opened) == 1
    sessions._kept["sc://here"] = session  # kept for the next job
    sessions.close()
    assert Session.stopped == stopped + 1 and not sessions._kept


def test_a_session_that_failed_to_open_ahead_is_opened_by_the_first_job(
    monkeypatch: pytest.MonkeyPatch, load: Loader, caplog: pytest.LogCaptureFixture
) -> None:
    from ferry.errors import TransientError

    def refused(url: str) -> Session:
        raise TransientError(f"cannot reach the Spark Connect server at {url}\nmore")

    monkeypatch.setattr(connect, "remote_session", refused)
    flow = load(BASE).flow("A->B")

    sessions = connect.ConnectSessions()
    sessions.prepare("sc://here")

    assert sessions._opened("sc://here", flow) is None
    assert "opening it again" in caplog.text and "more" not in caplog.text
    sessions.close()

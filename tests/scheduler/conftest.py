"""The scheduler tier runs on the session's one Airflow (`tests.support.airflow_stack`:
the flows of its config, which of them each module uses, and why its copies go through
spark-submit). Here: each module's view of it, and the stack's logs kept for a module
whose test failed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.scheduler.stack import Airflow, keep_logs
from tests.support.airflow_stack import Stack


class Standalone(Airflow):
    """test_flow_under_scheduler's view of the stack: its three flows."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(stack.url)
        self.home = stack.home
        """The stack's AIRFLOW_HOME: the SQLite database, and each component's log."""
        self.short_timeout = stack.flows["short_timeout"]
        self.unsynced_configs = stack.flows["unsynced_configs"]
        self.relay = stack.flows["relay"]


_FAILED: dict[str, list[str]] = {}
"""Module file -> what pytest reported of each of its failed tests (this worker's)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _FAILED.setdefault(report.fspath, []).append(
            f"{report.nodeid} ({report.when}, {time.strftime('%H:%M:%S')}):\n"
            f"{report.longreprtext}\n")


@pytest.fixture(scope="module", autouse=True)
def logs_of_a_failed_module(airflow_stack: Stack,
                            request: pytest.FixtureRequest) -> Iterator[None]:
    """Once a module whose test failed ends: the stack's logs so far, and its failures as
    pytest reported them, into test-artifacts/ under the module's name (the stack goes on
    for the next module)."""
    failures = request.session.testsfailed
    yield
    if request.session.testsfailed != failures:
        path = str(request.path.relative_to(request.config.rootpath))
        keep_logs(airflow_stack.home, request.module.__name__.rsplit(".", 1)[-1],
                  "\n".join(_FAILED.pop(path, [])))


@pytest.fixture(scope="module")
def standalone(airflow_stack: Stack) -> Standalone:
    return Standalone(airflow_stack)

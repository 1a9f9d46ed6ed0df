"""Which Spark the tests' copies run on: the session's warm Spark Connect server, unless
the test is marked `spark_submit` (the handful that test spark-submit itself).

`tests/conftest.py` sets the choice for each test; `flow_config` writes it into the flow's
config (`ferry.spark.master`) and `run_dag` into the `spark_default` connection. The
server starts on the first test that asks for it (a worker running none runs no server).
"""

from __future__ import annotations

from collections.abc import Callable

_master: Callable[[], str] | None = None


def use(master: Callable[[], str] | None) -> None:
    """The current test's master, asked for only when a copy needs it; None: spark-submit."""
    global _master
    _master = master


def warm_master() -> str | None:
    """The session's Spark Connect server (`sc://127.0.0.1:PORT`), started now if it is
    not yet; None when the test runs its copies through spark-submit."""
    return _master() if _master is not None else None


def runner_settings(extra: str) -> str:
    """Config lines for a test marked `spark_submit`: `ferry.copy.runner = spark`, since such
    a test tests Spark's copies, which a small plan would not get by default (the local
    runner copies plans of at most `ferry.copy.local.max.records` that would otherwise
    start spark-submit). Nothing for a test on the warm server (a warm Spark copies every
    plan), or one whose `extra` sets its runner itself."""
    if _master is not None or "ferry.copy.runner" in extra:
        return ""
    return "ferry.copy.runner = spark\n"

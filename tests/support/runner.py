"""Which runner the tests' copies run on, set for each test by `tests/conftest.py`:

- **local** (most tests): `ferry.copy.runner = local`, the lanes as threads of the test's
  own process, Delta appended with delta-rs: what a continuous loop and a small scheduled
  run get by default. Such a test is about Kafka, the offset map or the steps, not Spark,
  and starts no Spark;
- **warm** (a test marked `spark`): the session's warm Spark Connect server, started on the
  first test that asks for it (a worker running none runs no server), which copies every
  plan whatever its size: the Spark runner as a warm deployment gets it;
- **submit** (a test marked `spark_submit`, and the broker-free tier): spark-submit, with
  `ferry.copy.runner = spark` (a small plan would go to the local runner by default).

`flow_config` writes the choice into the flow's config (`ferry.copy.runner`,
`ferry.spark.master`) and `run_dag` into the `spark_default` connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

Kind = Literal["local", "warm", "submit"]

_kind: Kind = "submit"
_master: Callable[[], str] | None = None


def use(kind: Kind, master: Callable[[], str] | None = None) -> None:
    """The current test's runner; `master` (asked for only when a copy needs it) is the
    warm server's URL for `warm`."""
    global _kind, _master
    _kind, _master = kind, master


def warm_master() -> str | None:
    """The session's Spark Connect server (`sc://127.0.0.1:PORT`), started now if it is
    not yet, for a test on the warm server; None for any other."""
    return _master() if _kind == "warm" and _master is not None else None


def runner_settings(extra: str) -> str:
    """The config line choosing the current test's runner, before `extra`: nothing for a
    test on the warm server (a warm Spark copies every plan), one whose `extra` sets its
    runner itself, or a local one whose `extra` names a Spark master (it is about that
    Spark's copies)."""
    if _kind == "warm" or "ferry.copy.runner" in extra or (
            _kind == "local" and "ferry.spark.master" in extra):
        return ""
    return "ferry.copy.runner = " + ("local" if _kind == "local" else "spark") + "\n"

"""Services every worker of a test session shares: the local Kafka clusters and the warm
Spark Connect server run once per session, not once per xdist worker.

The process that runs the session (xdist's controller, or the only process with `-n 0`)
names a folder for them before any worker starts (`FERRY_TEST_SHARED`, or the folder
`FERRY_TEST_DIR` chooses). The first test that asks for a service starts it there under
a lock; every later one, on any worker, finds it running (`cluster.up` and `ferry spark
up` keep what runs). The same process stops them all when the session ends, unless
`FERRY_TEST_KEEP=1`.

Each test creates its own topics, groups and flow aliases, so tests on different workers
share the brokers as tests on one worker always did. A test that stops or restarts
brokers (the expiring and the replicated pairs) owns a pair for its module only.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ferry.local import cluster
from tests.support.cli import ferry

SHARED_ENV = "FERRY_TEST_SHARED"
"""The session's services folder, handed by the controller to its workers."""

SPARK_HOME_NAME = "ferry-home"
"""The services folder's FERRY_HOME for the warm Spark Connect server."""


def name_folder() -> None:
    """In the session's own process, before workers start: the folder services live in
    (a new one, even when an outer session set one: a session stops what is in its
    folder)."""
    chosen = os.environ.get("FERRY_TEST_DIR") or tempfile.mkdtemp(prefix="ferry-tests-")
    os.environ[SHARED_ENV] = str(Path(chosen).resolve())


def folder() -> Path:
    """The session's services folder (`name_folder` ran in the controller)."""
    return Path(os.environ[SHARED_ENV])


@contextmanager
def starting(name: str) -> Iterator[Path]:
    """`<folder>/<name>`, held under the session-wide lock of `name` while the caller
    starts (or finds) the service in it: one worker starts it, the others wait and keep
    it."""
    root = folder() / name
    root.mkdir(parents=True, exist_ok=True)
    with open(folder() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ferry_spark(home: Path, verb: str) -> dict[str, object]:
    """`ferry spark <verb> --json` on `home`; its JSON, or an AssertionError with stderr."""
    done = ferry("spark", verb, "--json", home=home)
    assert done.returncode == 0, f"ferry spark {verb}: {done.stderr[-3000:]}"
    return dict(json.loads(done.stdout))


def _stop(root: Path) -> None:
    if root.name == SPARK_HOME_NAME:
        stopped = ferry_spark(root, "down")
        assert stopped["stopped"] is True, f"the session's Spark Connect server: {stopped}"
    else:
        cluster.down(root, wipe=True)


def stop_all() -> None:
    """Stop every service the session started (its folders say which), then remove the
    folder unless FERRY_TEST_DIR chose it. Each stop runs even if an earlier one failed;
    the first failure is raised at the end."""
    if os.environ.get("FERRY_TEST_KEEP") or not os.environ.get(SHARED_ENV):
        return
    failures: list[Exception] = []
    for root in sorted(p for p in folder().iterdir() if p.is_dir()):
        try:
            _stop(root)
        except Exception as failure:  # stop the rest, then report the first
            failures.append(failure)
    if failures:
        raise failures[0]
    if not os.environ.get("FERRY_TEST_DIR"):
        shutil.rmtree(folder(), ignore_errors=True)

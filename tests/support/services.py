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

TOXIPROXY = "toxiproxy"
"""The services folder of the session's Toxiproxy (`tests.support.toxiproxy`)."""

SPARK_HOME_NAME = "ferry-home"
"""The services folder's FERRY_HOME for the warm Spark Connect server."""


def name_folder(parent: Path | None = None) -> None:
    """In the session's own process, before workers start: the folder services live in
    (a new one, even when an outer session set one: a session stops what is in its
    folder), under `parent` when given (the session's `scratch` folder)."""
    chosen = os.environ.get("FERRY_TEST_DIR") or tempfile.mkdtemp(prefix="ferry-tests-",
                                                                  dir=parent)
    os.environ[SHARED_ENV] = str(Path(chosen).resolve())


SCRATCH_ON = Path("/dev/shm")
"""Where the session's files go when it is a tmpfs with room (`scratch`)."""

SCRATCH_ROOM = 8 * 2**30
"""Free bytes /dev/shm, and the machine's available memory, must both have for the
session's files to go there (a suite run writes well under a GB; a test that installs the
package's dependency ranges itself, without the test command's installs, 3 GB)."""


def _tmpfs_with_room(path: Path) -> bool:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
        available = next(int(line.split()[1]) * 1024 for line in
                         Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return False
    tmpfs = any(line.split()[1:3] == [str(path), "tmpfs"] for line in mounts)
    return (tmpfs and os.access(path, os.W_OK) and available >= SCRATCH_ROOM
            and shutil.disk_usage(path).free >= SCRATCH_ROOM)


def scratch() -> Path | None:
    """In the session's own process: a new folder for everything the session writes (its
    brokers' logs, Delta tables, SQLite databases, pytest's tmp_path), on a tmpfs when
    /dev/shm is one with room (`SCRATCH_ROOM`), else None (the system's temporary
    folder). The brokers' and SQLite's fsyncs and the creation of thousands of partition
    folders cost the 2-core machine CPU and waits on disk: on tmpfs the 10,001-partition
    test ran in half the time. `FERRY_TEST_SCRATCH=0` keeps everything on disk; the
    session removes the folder when it ends (`remove_scratch`), unless FERRY_TEST_KEEP=1."""
    if os.environ.get("FERRY_TEST_SCRATCH") == "0" or not _tmpfs_with_room(SCRATCH_ON):
        return None
    return Path(tempfile.mkdtemp(prefix="ferry-session-", dir=SCRATCH_ON))


def remove_scratch(folder: Path) -> None:
    """The session's scratch folder, at its end (kept with FERRY_TEST_KEEP=1)."""
    if not os.environ.get("FERRY_TEST_KEEP"):
        shutil.rmtree(folder, ignore_errors=True)


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
    elif root.name == TOXIPROXY:
        from tests.support import toxiproxy

        toxiproxy.stop(root)
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

"""Local Kafka nodes start from a class-data archive (JDK AppCDS), as the copy job's driver
does (`ferry.spark.classdata`).

Every start of a local node is two cold JVMs: formatting its storage, then the node. Measured
here (JDK 17, a one-node cluster): formatting 1.1 s of CPU as is, 0.7 s with the classes
mapped from an archive; the node from its start to its first answer 3.0 s of CPU and 1.9 s
of wall time as is, 1.7 s and 1.0 s with the archive. The test suite starts some thirty.

- The archive is made once per `java` and set of Kafka jars, by a training node: a
  throwaway one-node cluster started with `-XX:ArchiveClassesAtExit=<partial>` and stopped
  cleanly once it answers, which makes the JVM write the classes it loaded as it exits.
  The partial archive is checked by a JVM that must map it (`-Xshare:on`) and only then
  renamed into place, so no node ever maps a half-written file.
- Training holds a lock file: concurrent `ferry local up`s (parallel test workers) train
  once, the others wait and use its archive. A training that made no archive leaves a
  marker, and none is tried again for an hour: a JDK that cannot make one costs one
  training, not one per `up`.
- A node maps the archive with `-XX:SharedArchiveFile`. The JVM checks it against its own
  version and class path and runs without it when they differ; a training that fails is
  logged and the nodes start without an archive. Neither costs correctness.

Archives live in `<cache>/classdata-kafka/` (about 50 MB); adopting one deletes the others.
`KAFKA_OPTS`, Kafka's own variable for extra JVM options of its scripts, is honoured too.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from ferry.jars import cache_dir
from ferry.spark.classdata import PARTIAL, QUIET, SUFFIX, java_binary, prune

FAILED = ".failed"
RETRY_SECONDS = 3600.0
"""How long after a training that made no archive none is tried again."""


def directory() -> Path:
    return cache_dir() / "classdata-kafka"


def archive_path(jars: Path) -> Path | None:
    """Where the archive for nodes on `jars` lives (made or not); None when there is no
    `java` to key on or the path holds a space (JVM options are split on spaces)."""
    java = java_binary()
    folder = directory()
    if java is None or any(c.isspace() for c in f"{folder}{jars}"):
        return None
    digest = hashlib.sha256()
    stat = Path(java).stat()
    digest.update(f"{java}:{stat.st_size}:{stat.st_mtime_ns}:{jars.resolve()}".encode())
    for jar in sorted(jars.glob("*.jar")):  # the JVM checks each jar's size and mtime
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return folder / f"kafka-{digest.hexdigest()[:16]}{SUFFIX}"


def java_options(jars: Path, dump_to: Path | None = None) -> list[str]:
    """The JVM options of a local node's JVMs on `jars`: the archive's when it exists (or,
    with `dump_to`, writing one there at exit), then `KAFKA_OPTS`."""
    archive = archive_path(jars)
    if dump_to is not None:
        mapped = [f"-XX:ArchiveClassesAtExit={dump_to}"]
    elif archive and archive.is_file():
        mapped = [QUIET, f"-XX:SharedArchiveFile={archive}"]
    else:
        mapped = []
    return [*mapped, *shlex.split(os.environ.get("KAFKA_OPTS", ""))]


@contextlib.contextmanager
def training(jars: Path) -> Iterator[Path | None]:
    """Under the archive's lock: None when the archive exists, cannot be made, or a training
    failed within the hour; else the partial archive a training node is to write
    (`-XX:ArchiveClassesAtExit`). After the block, a partial the JVM wrote is checked and
    adopted; one left unwritten or broken is deleted, and the failure marked."""
    archive = archive_path(jars)
    if archive is None:
        yield None
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        failed = archive.with_suffix(FAILED)
        if archive.is_file() or (failed.is_file()
                                 and time.time() - failed.stat().st_mtime < RETRY_SECONDS):
            yield None
            return
        partial = archive.with_name(f"{archive.stem}.{uuid.uuid4().hex[:8]}{SUFFIX}{PARTIAL}")
        try:
            yield partial
            if partial.is_file() and _maps(partial, jars):
                partial.replace(archive)
                failed.unlink(missing_ok=True)
                prune(archive)
            else:
                failed.touch()
        finally:
            partial.unlink(missing_ok=True)


def _maps(archive: Path, jars: Path) -> bool:
    """True when a JVM on `jars` maps `archive` (it refuses to start otherwise)."""
    java = java_binary()
    if java is None:
        return False
    check = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}", QUIET,
                            "-cp", f"{jars}/*", "-version"],
                           capture_output=True, check=False, timeout=60)
    return check.returncode == 0

"""The copy job's driver JVM starts from a class-data archive (JDK AppCDS).

A spark-submit cycle is a cold JVM: it loads and verifies some 20,000 classes of Spark,
Scala, Hadoop and Delta, most of them again in every cycle. Measured here (JDK 17, a
session plus two Delta appends): 19 s as is, 11 s with the classes mapped from an archive
and the JIT kept at its first tier, which is all a driver that mostly waits on Python
lanes needs.

- The first job for a given class path runs with `-XX:ArchiveClassesAtExit=<partial>`: the
  JVM writes what it loaded when it exits. Only after that job succeeded does its submitter
  `adopt` the partial archive (a rename), so no JVM ever maps a half-written file.
- Later jobs run with `-XX:SharedArchiveFile=<archive>`. The JVM checks the archive against
  its own version and class path and, when they differ, runs without it: a stale archive
  costs time, never correctness. The archive's name is a digest of the `java` binary, the
  Spark jars and the extra class path, so a changed install gets a new one.
- Delta's jars go on the driver's class path as well as on `spark.jars` (which ships them
  to executors): the JVM archives only what its built-in loaders load.

Archives live in `<cache>/classdata/` (about 180 MB each); adopting one deletes the others
and partial archives older than a day.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
import uuid
from pathlib import Path

from ferry.jars import cache_dir

SUFFIX = ".jsa"
PARTIAL = ".partial"
STALE_SECONDS = 86_400
# C1 only: the driver mostly waits on the lanes; C2 compiling Spark's start-up paths costs
# a core for seconds that a short job never earns back.
JIT = "-XX:TieredStopAtLevel=1"
QUIET = "-Xlog:cds*=off"  # the JVM's CDS warnings would land in the task log as noise


def directory() -> Path:
    return cache_dir() / "classdata"


def java_binary() -> str | None:
    """The `java` spark-submit runs: `$JAVA_HOME/bin/java`, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java").resolve())
    found = shutil.which("java")
    return str(Path(found).resolve()) if found else None


def archive_key(class_path: list[str]) -> str | None:
    """A digest of what the archive depends on; None when there is no `java` to key on."""
    import pyspark

    java = java_binary()
    if java is None:
        return None
    digest = hashlib.sha256()
    stat = Path(java).stat()
    digest.update(f"{java}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")):
        digest.update(jar.name.encode())
    for entry in class_path:
        digest.update(entry.encode())
    digest.update(JIT.encode())
    return digest.hexdigest()[:16]


def driver_java_options(class_path: list[str]) -> tuple[str, str | None]:
    """The class-data options for a driver with `class_path` prepended, and the partial
    archive that driver will write (to `adopt` once its job succeeded), or None when an
    archive is in place already or none can be made (no `java`, a path with spaces)."""
    key = archive_key(class_path)
    folder = directory()
    if key is None or any(c.isspace() for c in str(folder)):
        return JIT, None
    archive = folder / f"{key}{SUFFIX}"
    if archive.exists():
        return f"{JIT} {QUIET} -XX:SharedArchiveFile={archive}", None
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{key}.{uuid.uuid4().hex[:8]}{SUFFIX}{PARTIAL}"
    return f"{JIT} {QUIET} -XX:ArchiveClassesAtExit={partial}", str(partial)


def adopt(partial: str | None) -> bool:
    """Make the archive a succeeded job wrote the one later jobs map; delete other keys'
    archives and stale partials. True when `partial` became the archive. Safe to call
    for a partial that was never written (the JVM could not) or already adopted."""
    if not partial:
        return False
    source = Path(partial)
    if not source.name.endswith(SUFFIX + PARTIAL) or not source.is_file():
        return False
    key = source.name.split(".", 1)[0]
    archive = source.with_name(f"{key}{SUFFIX}")
    if archive.exists():  # another job's archive won the race
        source.unlink(missing_ok=True)
        return False
    source.replace(archive)
    prune(archive)
    return True


def prune(keep: Path) -> None:
    """Delete the other archives in `keep`'s folder, and partial archives a job or a
    training left there over a day ago."""
    now = time.time()
    for path in keep.parent.iterdir():
        if path == keep:
            continue
        # Another job may adopt or prune the same files meanwhile: gone is fine.
        with contextlib.suppress(FileNotFoundError):
            stale = path.name.endswith(PARTIAL) and now - path.stat().st_mtime > STALE_SECONDS
            if path.name.endswith(SUFFIX) or stale:
                path.unlink()

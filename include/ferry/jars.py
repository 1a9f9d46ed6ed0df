"""Fetch the jars Ferry runs with `java`, from Maven Central, once, into a cache.

- Kafka: the broker (`kafka_2.13`), MM2's client (`connect-mirror`) and log4j2, copied
  into `<cache>/jars/kafka-<version>/` and run with `java -cp '<dir>/*'`.
- Delta: `delta-spark` and its runtime dependencies, copied into
  `<cache>/jars/delta-<version>/`; the Spark adapter puts on `spark.jars` those that Spark
  does not ship itself. (Not `spark.jars.packages`: Ivy reading `~/.m2` fails on POMs whose
  jars Maven never downloaded, and it would reach for the network on every submit.)

The cache is `$FERRY_CACHE_DIR`, else `~/.cache/ferry`. A directory is complete only when
its marker holds the POM's hash, so an interrupted download is redone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from ferry.errors import TerminalError

KAFKA_VERSION = "4.3.1"
DELTA_VERSION = "4.4.0"


def cache_dir() -> Path:
    return Path(os.environ.get("FERRY_CACHE_DIR") or Path.home() / ".cache" / "ferry")


def _pom(name: str) -> Path:
    return Path(str(resources.files("ferry.local") / "poms" / name))


def _mvn(args: list[str], what: str) -> None:
    if shutil.which("mvn") is None:
        raise TerminalError(f"cannot fetch the {what} jars: mvn is not installed; install "
                            "Maven (apt-get install maven) and retry")
    result = subprocess.run(["mvn", "-q", "-B", *args], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        raise TerminalError(f"cannot fetch the {what} jars from Maven Central: "
                            + " | ".join(tail))


def _copy_dependencies(pom_name: str, dir_name: str, what: str) -> Path:
    """Copy a POM's runtime dependencies into `<cache>/jars/<dir_name>`, once. Processes
    that fetch at once (the setup and a test run, two workers' first task) take turns on a
    lock file: the first fetches, the others find its directory complete; a directory in
    use is never removed under a running JVM while it is still the right one."""
    import fcntl

    pom = _pom(pom_name)
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    target = cache_dir() / "jars" / dir_name
    marker = target / ".complete"
    if marker.is_file() and marker.read_text() == digest:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(f".{dir_name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if marker.is_file() and marker.read_text() == digest:
            return target  # fetched by the process this one waited for
        partial = target.with_name(f"{dir_name}.partial")
        shutil.rmtree(partial, ignore_errors=True)  # an interrupted fetch's
        _mvn(["-f", str(pom), "dependency:copy-dependencies",
              f"-DoutputDirectory={partial}", "-DincludeScope=runtime"], what)
        (partial / ".complete").write_text(digest)
        shutil.rmtree(target, ignore_errors=True)  # an older or interrupted copy
        partial.rename(target)
    return target


def kafka_jars() -> Path:
    """The directory of Kafka broker jars, fetched on first use."""
    return _copy_dependencies("kafka.xml", f"kafka-{KAFKA_VERSION}", "Kafka")


def delta_jars() -> Path:
    """The directory of Delta Lake jars (and their dependencies), fetched on first use."""
    return _copy_dependencies("delta.xml", f"delta-{DELTA_VERSION}", "Delta")


def log4j_config() -> Path:
    return Path(str(resources.files("ferry.local") / "log4j2.properties"))

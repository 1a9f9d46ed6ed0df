"""Fetch the jars Ferry runs with `java`, from Maven Central, once, into a cache.

- Kafka: the broker (`kafka_2.13`), MM2's client (`connect-mirror`) and log4j2, copied
  into `<cache>/jars/kafka-<version>/` and run with `java -cp '<dir>/*'`.
- Delta: resolved into the local Maven repository (`~/.m2`), where Spark's Ivy resolver
  looks first, so sessions start without reaching the network.

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
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"


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


def kafka_jars() -> Path:
    """The directory of Kafka broker jars, fetched on first use."""
    pom = _pom("kafka.xml")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    target = cache_dir() / "jars" / f"kafka-{KAFKA_VERSION}"
    marker = target / ".complete"
    if marker.is_file() and marker.read_text() == digest:
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _mvn(["-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
          "-DincludeScope=runtime"], "Kafka")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    marker.write_text(digest)
    return target


def delta_jars() -> str:
    """Make the Delta jars resolvable offline (local Maven repo); returns the coordinate."""
    pom = _pom("delta.xml")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    marker = cache_dir() / "jars" / "delta.complete"
    if not (marker.is_file() and marker.read_text() == digest):
        _mvn(["-f", str(pom), "dependency:resolve"], "Delta")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(digest)
    return DELTA_PACKAGE


def log4j_config() -> Path:
    return Path(str(resources.files("ferry.local") / "log4j2.properties"))

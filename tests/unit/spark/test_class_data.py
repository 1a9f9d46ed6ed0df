"""The copy job's driver JVM and its class-data archive: the first job for a class path
writes a partial archive, its submitter adopts it only after the job succeeded, and later
jobs map it. (That a real driver maps it is shown in tests/integration/test_mirror_cli.py.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ferry.spark import classdata
from ferry.spark.submit import driver_conf

CLASS_PATH = ["/opt/delta/delta-spark_2.13-4.4.0.jar", "/opt/delta/delta-storage-4.4.0.jar"]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of its own, with the jars the setup fetched."""
    from ferry.jars import cache_dir

    jars = cache_dir() / "jars"
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "jars").symlink_to(jars, target_is_directory=True)
    monkeypatch.setenv("FERRY_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "classdata"


def option(options: str, name: str) -> str | None:
    found = [o.split("=", 1)[1] for o in options.split() if o.startswith(f"-XX:{name}=")]
    return found[0] if found else None


def test_the_first_job_writes_a_partial_archive_and_later_jobs_map_the_adopted_one(
        cache: Path) -> None:
    # the first job: no archive yet, so its JVM writes one at exit, under a partial name
    options, partial = classdata.driver_java_options(CLASS_PATH)
    assert partial is not None and option(options, "ArchiveClassesAtExit") == partial
    assert option(options, "SharedArchiveFile") is None
    assert Path(partial).parent == cache and partial.endswith(".jsa.partial")

    # a second job before the first one succeeded writes its own partial, maps nothing
    options2, partial2 = classdata.driver_java_options(CLASS_PATH)
    assert partial2 not in (None, partial) and option(options2, "SharedArchiveFile") is None

    # the first job succeeded: its archive is adopted
    Path(partial).write_bytes(b"archive 1")
    assert classdata.adopt(partial) is True
    options3, partial3 = classdata.driver_java_options(CLASS_PATH)
    archive = option(options3, "SharedArchiveFile")
    assert partial3 is None and archive is not None and Path(archive).read_bytes() == b"archive 1"

    # the second one succeeds later: the adopted archive stays, its partial goes
    assert partial2 is not None
    Path(partial2).write_bytes(b"archive 2")
    assert classdata.adopt(partial2) is False
    assert sorted(p.name for p in cache.iterdir()) == [Path(archive).name]


@pytest.mark.parametrize(("what", "partial"), [
    ("no archive to adopt", None),
    ("a job whose JVM could not write its archive",
     "{cache}/0123456789abcdef.1a2b3c4d.jsa.partial"),
    ("a path that is not a partial archive", "{cache}/notes.txt"),
])
def test_adopting_nothing_is_a_no_op(cache: Path, what: str, partial: str | None) -> None:
    cache.mkdir(parents=True)
    (cache / "notes.txt").write_text("kept")
    assert classdata.adopt(partial and partial.format(cache=cache)) is False, what
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt"]


def test_adopting_deletes_other_class_paths_archives_and_stale_partials(cache: Path) -> None:
    cache.mkdir(parents=True)
    old = cache / "aaaaaaaaaaaaaaaa.jsa"
    stale = cache / "bbbbbbbbbbbbbbbb.00000000.jsa.partial"
    running = cache / "cccccccccccccccc.11111111.jsa.partial"  # another job, still running
    for path in (old, stale, running):
        path.write_bytes(b"x")
    day_ago = time.time() - classdata.STALE_SECONDS - 60
    os.utime(stale, (day_ago, day_ago))
    _, partial = classdata.driver_java_options(CLASS_PATH)
    assert partial is not None
    Path(partial).write_bytes(b"new")

    classdata.adopt(partial)

    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [running.name, Path(partial).name.split(".", 1)[0] + ".jsa"])


@pytest.mark.parametrize(("change", "same"), [
    ("nothing", True),
    ("another Delta jar", False),
])
def test_the_archive_is_keyed_on_the_class_path(change: str, same: bool) -> None:
    other = CLASS_PATH if change == "nothing" else [*CLASS_PATH, "/opt/delta/extra.jar"]
    assert (classdata.archive_key(CLASS_PATH) == classdata.archive_key(other)) is same


def test_the_driver_gets_deltas_jars_on_its_class_path_and_the_archive_options() -> None:
    conf, partial = driver_conf()
    options = conf["spark.driver.extraJavaOptions"].split()
    assert options[0].startswith("-Dlog4j2.configurationFile=file:")
    assert classdata.JIT in options and option(" ".join(options), "ArchiveClassesAtExit") == partial
    jars = conf["spark.driver.extraClassPath"].split(os.pathsep)
    assert jars and all(j.endswith(".jar") for j in jars)
    assert any("delta-spark" in j for j in jars)
    assert conf["spark.jars"].split(",") == jars  # shipped to executors: the same jars


def test_without_java_the_driver_gets_no_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert classdata.driver_java_options(CLASS_PATH) == (classdata.JIT, None)

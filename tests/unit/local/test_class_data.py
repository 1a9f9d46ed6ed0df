"""Local Kafka nodes and their class-data archive: keyed on `java` and Kafka's jars, made
once under a lock, adopted only when a JVM maps it, and mapped by every later node's JVMs
together with `KAFKA_OPTS`. (That the session's real brokers map it, and that a broken archive is
not adopted, is shown with real JVMs in tests/integration/test_local_clusters.py.)"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ferry.local import classdata


@pytest.fixture
def jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of its own, a `java` of its own (no JDK needed), and a folder of two jars."""
    monkeypatch.setenv("FERRY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_bytes(b"#!")
    monkeypatch.setattr(classdata, "java_binary", lambda: str(java))
    folder = tmp_path / "kafka-4.2.0"
    folder.mkdir()
    for name in ("kafka_2.13-4.2.0.jar", "kafka-clients-4.2.0.jar"):
        (folder / name).write_bytes(b"PK")
    return folder


@pytest.mark.parametrize(("change", "same"), [
    ("nothing", True),
    ("a jar added", False),
    ("a jar of another size", False),
    ("a jar written again", False),
])
def test_the_archive_is_keyed_on_the_jars(jars: Path, change: str, same: bool) -> None:
    before = classdata.archive_path(jars)
    if change == "a jar added":
        (jars / "zstd-jni-1.5.7.jar").write_bytes(b"PK")
    elif change == "a jar of another size":
        (jars / "kafka-clients-4.2.0.jar").write_bytes(b"PK\x03\x04")
    elif change == "a jar written again":  # same size, a new mtime: the JVM would refuse
        import os

        os.utime(jars / "kafka-clients-4.2.0.jar", ns=(1, 1))

    after = classdata.archive_path(jars)

    assert before is not None and before.parent == classdata.directory()
    assert (before == after) is same


def test_a_cache_path_with_a_space_gets_no_archive(jars: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_CACHE_DIR", str(tmp_path / "my cache"))
    assert classdata.archive_path(jars) is None
    with classdata.training(jars) as partial:
        assert partial is None


@pytest.mark.parametrize(("archive", "kafka_opts", "wanted"), [
    (False, "", []),
    (False, "-Xss2m -Dx=1", ["-Xss2m", "-Dx=1"]),
    (True, "", [classdata.QUIET, "-XX:SharedArchiveFile={archive}"]),
    (True, "-Xss2m", [classdata.QUIET, "-XX:SharedArchiveFile={archive}", "-Xss2m"]),
])
def test_a_nodes_jvm_options_map_the_archive_when_made_then_kafka_opts(
        jars: Path, monkeypatch: pytest.MonkeyPatch, archive: bool, kafka_opts: str,
        wanted: list[str]) -> None:
    path = classdata.archive_path(jars)
    assert path is not None
    if archive:
        path.parent.mkdir(parents=True)
        path.write_bytes(b"made")
    monkeypatch.setenv("KAFKA_OPTS", kafka_opts)

    assert classdata.java_options(jars) == [w.format(archive=path) for w in wanted]


def test_a_training_whose_jvm_wrote_nothing_adopts_nothing_and_waits_an_hour_to_retry(
        jars: Path) -> None:
    import os
    import time

    with classdata.training(jars) as partial:
        assert partial is not None and partial.name.endswith(".jsa.partial")

    archive = classdata.archive_path(jars)
    assert archive is not None
    assert sorted(p.name for p in classdata.directory().iterdir() if p.suffix != ".lock") == [
        archive.with_suffix(".failed").name]
    with classdata.training(jars) as again:
        assert again is None  # within the hour: no second training
    hour_ago = time.time() - classdata.RETRY_SECONDS - 60
    os.utime(archive.with_suffix(".failed"), (hour_ago, hour_ago))
    with classdata.training(jars) as later:
        assert later is not None


def test_the_training_node_gets_kafka_opts_too(jars: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_OPTS", "-Xss2m")
    assert classdata.java_options(jars, Path("/cache/k.jsa.partial")) == [
        "-XX:ArchiveClassesAtExit=/cache/k.jsa.partial", "-Xss2m"]


def test_an_archive_in_place_is_not_trained_again(jars: Path) -> None:
    path = classdata.archive_path(jars)
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"made")

    with classdata.training(jars) as partial:
        assert partial is None
    assert path.read_bytes() == b"made"


def test_a_second_training_waits_for_the_first_ones_lock(jars: Path) -> None:
    # given a training in progress
    order: list[str] = []

    def second() -> None:
        with classdata.training(jars):
            order.append("second")

    with classdata.training(jars):
        worker = threading.Thread(target=second)
        worker.start()
        worker.join(0.5)
        # then the second one is held at the lock until the first one ends
        assert worker.is_alive() and order == []
        order.append("first")
    worker.join(10)
    assert order == ["first", "second"]

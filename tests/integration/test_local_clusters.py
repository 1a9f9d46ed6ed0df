"""The local cluster launcher against real Kafka 4.x brokers (KRaft, Maven jars)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from ferry.jars import kafka_jars
from ferry.local import classdata
from tests.support.kafka_data import create_topic, produce

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("alias", ["source", "target"])
def test_each_cluster_accepts_produce_and_consume(
    clusters: dict[str, str], topic_name: str, alias: str
) -> None:
    bootstrap = clusters[alias]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    sent = [(f"k{i}".encode(), f"v{i}".encode(), i % 3) for i in range(30)]
    for key, value, partition in sent:
        producer.produce(topic_name, key=key, value=value, partition=partition,
                         headers=[("h", b"1")])
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic_name,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(3)])
    got: list[tuple[bytes | None, bytes | None, int]] = []
    try:
        while len(got) < len(sent):
            for msg in consumer.consume(100, timeout=5):
                assert msg.error() is None
                got.append((msg.key(), msg.value(), msg.partition()))
                assert msg.headers() == [("h", b"1")]
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


def test_clusters_are_independent(clusters: dict[str, str], topic_name: str) -> None:
    source = AdminClient({"bootstrap.servers": clusters["source"]})
    source.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(timeout=30)
    target = AdminClient({"bootstrap.servers": clusters["target"]})
    target_topics = target.list_topics(timeout=10).topics
    assert topic_name not in target_topics


def test_transactions_work_on_the_local_brokers(clusters: dict[str, str], topic_name: str) -> None:
    bootstrap = clusters["target"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, value=b"committed")
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic_name,
                         "isolation.level": "read_committed"})
    # commit_transaction() returns once the coordinator has decided; the markers that
    # move the partition's last stable offset are written just after, asynchronously.
    deadline = time.monotonic() + 15
    try:
        while True:
            offsets = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
            if offsets == (0, 2) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        consumer.close()
    assert offsets == (0, 2)  # the record and its commit marker


def _ferry(*args: str) -> subprocess.CompletedProcess[str]:
    ferry = Path(sys.executable).parent / "ferry"
    return subprocess.run([str(ferry), *args], capture_output=True, text=True, check=False,
                          env={**os.environ}, timeout=180)


def _pid_alive(pid: int) -> bool:
    """Running (a zombie is not: this sandbox's PID 1 may never reap it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_the_session_brokers_map_the_class_data_archive_their_first_up_made(
        clusters: dict[str, str]) -> None:
    archive = classdata.archive_path(kafka_jars())
    assert archive is not None and archive.is_file()
    for alias, bootstrap in clusters.items():
        port = bootstrap.rsplit(":", 1)[1]
        [pid] = [p for p in _broker_pids() if f":{port}," in _properties_text(p)]
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert str(archive) in maps, f"cluster {alias}'s broker (pid {pid}) maps no archive"


def test_a_training_whose_jvm_wrote_a_broken_archive_adopts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = kafka_jars()
    monkeypatch.setenv("FERRY_CACHE_DIR", str(tmp_path / "cache"))

    with classdata.training(jars) as partial:
        assert partial is not None
        partial.write_bytes(b"not an archive")  # a JVM on these jars refuses to map it

    archive = classdata.archive_path(jars)
    assert archive is not None
    assert [p.name for p in classdata.directory().iterdir() if p.suffix != ".lock"] == [
        archive.with_suffix(".failed").name]  # marked: not tried again for an hour
    assert classdata.java_options(jars) == shlex.split(os.environ.get("KAFKA_OPTS", ""))


def _broker_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and b"kafka.Kafka" in _cmdline(p)]


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _properties_text(pid: int) -> str:
    """The text of the server.properties a broker runs with ("" when unreadable)."""
    args = _cmdline(Path(f"/proc/{pid}")).split(b"\0")
    try:
        return Path(args[args.index(b"kafka.Kafka") + 1].decode()).read_text()
    except (ValueError, IndexError, OSError):
        return ""


def test_cli_up_status_down_leaves_no_process(tmp_path: Path) -> None:
    # given a config naming one cluster
    config = tmp_path / "solo.properties"
    config.write_text("clusters = solo\nsolo.bootstrap.servers = ${file:x:y}\n")
    root = tmp_path / "local"

    # when it is brought up
    up = _ferry("local", "up", "--config", str(config), "--dir", str(root), "--json")
    assert up.returncode == 0, up.stderr
    [started] = json.loads(up.stdout)
    assert started["alias"] == "solo" and started["bootstrap"].startswith("127.0.0.1:")
    assert (root / "bootstrap.properties").read_text() == \
        f"solo.bootstrap.servers={started['bootstrap']}\n"

    # then status sees it running and answering; up again is idempotent
    status = _ferry("local", "status", "--dir", str(root), "--json")
    assert status.returncode == 0
    port = int(started["bootstrap"].rsplit(":", 1)[1])
    assert started["brokers"] == 1 and started["proxy"] is None  # as status says it
    assert json.loads(status.stdout)[0] | {"dir": None} == {
        "alias": "solo", "bootstrap": started["bootstrap"], "pid": started["pid"],
        "running": True, "answering": True, "dir": None, "brokers": 1,
        "nodes": [{"node": 1, "port": port, "pid": started["pid"]}], "proxy": None}
    again = _ferry("local", "up", "--config", str(config), "--dir", str(root))
    assert again.stdout.strip() == f"solo {started['bootstrap']}"

    # and down stops exactly that process
    down = _ferry("local", "down", "--dir", str(root))
    assert down.returncode == 0 and down.stdout.strip() == "stopped: solo"
    assert not _pid_alive(started["pid"])
    stopped = _ferry("local", "status", "--dir", str(root))
    assert stopped.returncode == 1 and "solo" in stopped.stdout and "stopped" in stopped.stdout


@pytest.mark.parametrize("args", [["--behind-proxy", "--secure"],
                                  ["--behind-proxy", "--brokers", "3"]])
def test_up_behind_a_proxy_refuses_what_it_cannot_proxy_with_one_line(
    tmp_path: Path, args: list[str]
) -> None:
    done = _ferry("local", "up", *args, "--dir", str(tmp_path / "local"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ferry: --behind-proxy runs one PLAINTEXT node per cluster: drop --brokers or --secure"]
    assert not (tmp_path / "local" / "source").exists()


@pytest.mark.parametrize("count", ["0", "-1", "three"])
def test_up_refuses_a_node_count_below_one_with_one_line(tmp_path: Path, count: str) -> None:
    done = _ferry("local", "up", "--brokers", count, "--dir", str(tmp_path / "local"))

    assert done.returncode == 2
    assert f"{count!r} is not a node count: give 1 or more" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "local").exists()


def test_down_never_signals_a_pid_it_did_not_start(tmp_path: Path) -> None:
    # a cluster.json whose pid belongs to another process (this test's own python)
    fake = tmp_path / "local" / "ghost"
    fake.mkdir(parents=True)
    (fake / "cluster.json").write_text(json.dumps({
        "alias": "ghost", "dir": str(fake), "port": 1, "controller_port": 2,
        "pid": os.getpid()}))
    down = _ferry("local", "down", "--dir", str(tmp_path / "local"))
    assert down.returncode == 0 and down.stdout.strip() == "nothing was running"
    assert _pid_alive(os.getpid())


def test_unique_topic_names_per_test(topic_name: str) -> None:
    assert topic_name.startswith("test-unique-topic-names-per-test-")
    assert len(topic_name.rsplit("-", 1)[-1]) == 6


def test_the_test_producer_fails_on_a_record_the_broker_never_took(
    clusters: dict[str, str], topic_name: str
) -> None:
    # A record for a partition the producer's metadata does not list (as just after a
    # growth, before the broker's metadata shows it) is dropped with a delivery error while
    # flush() still reports an empty queue: a test must hear of it where it happens, not as
    # a missing record on the target minutes later.
    create_topic(clusters["source"], topic_name, 2)
    with pytest.raises(AssertionError, match=rf"not delivered, first {topic_name}-4: "):
        produce(clusters["source"], topic_name, [(b"k", b"v", 0), (b"k", b"v", 4)])

"""Kafka's transient states are waited out, as MirrorMaker 2 waits them out: a cluster that
restarts answers "coordinator loading", "not coordinator" or nothing for a while, and a
call made then returns its answer once the cluster is back. A cluster that stays down fails
the call after the budget (`ferry.kafka.retry.seconds`) with an error naming the cluster,
the call and the last error; a lasting error (denied, unknown) fails at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ferry.config.clients import ClientConfig
from ferry.core.checkpoints import Checkpoint, TargetGroup
from ferry.core.planner import TopicPartition as TP
from ferry.core.planner import Watermarks
from ferry.core.sync.configs import AlterTopicConfig
from ferry.core.sync.topics import GrowTopic, TopicActions
from ferry.errors import TerminalError
from ferry.kafka import configs, groups, mm2topics
from ferry.kafka.admin import Admin
from ferry.kafka.retry import RetriesExhausted
from ferry.kafka.topology import apply_topology
from ferry.local import cluster
from tests.support.handshake import starting_broker
from tests.support.kafka_data import create_topic, flow_config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOPIC, GROUP, PARTITIONS = "restarts", "restart-reader", 200


@pytest.fixture(scope="module")
def lone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A cluster of this module's own (it is stopped and started again), with a group that
    committed offsets on every partition of a 200-partition topic 20 times over: enough in
    `__consumer_offsets` that a restarted broker takes a moment to load its groups."""
    root = tmp_path_factory.mktemp("kafka-restarts")
    try:
        (state,) = cluster.up(("lone",), root)
        # listed with its leaders first: a commit to a topic the broker's metadata does not
        # show yet is refused (UNKNOWN_TOPIC_OR_PART), as a loaded CI machine saw
        create_topic(state.bootstrap, TOPIC, PARTITIONS)
        consumer = Consumer({"bootstrap.servers": state.bootstrap, "group.id": GROUP,
                             "enable.auto.commit": False})
        try:
            for n in range(1, 21):
                consumer.commit(offsets=[TopicPartition(TOPIC, p, n * 10 + p, f"m{p}")
                                         for p in range(PARTITIONS)], asynchronous=False)
        finally:
            consumer.close()
        yield root, state.bootstrap
    finally:
        cluster.down(root, wipe=True)


READER = textwrap.dedent("""
    import json, sys
    from ferry.config.clients import ClientConfig
    from ferry.kafka.admin import Admin
    admin = Admin(ClientConfig("lone", "admin", {"bootstrap.servers": sys.argv[1]}))
    found = admin.committed(sys.argv[2], [(sys.argv[3], p) for p in range(3)])
    print(json.dumps(sorted([t, p, o, m] for (t, p), (o, m) in found.items())))
""")


@pytest.mark.parametrize("restart", [1, 2, 3])
def test_group_offsets_read_while_the_cluster_restarts_are_returned_once_it_is_back(
    lone_cluster: tuple[Path, str], restart: int
) -> None:
    # given a stopped cluster, and a reader that asks for the group's offsets at once (in
    # a process of its own: librdkafka's admin API used to crash it, SIGSEGV, here)
    root, bootstrap = lone_cluster
    cluster.down(root)
    reader = subprocess.Popen([sys.executable, "-c", READER, bootstrap, GROUP, TOPIC],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=os.environ | {"PYTHONFAULTHANDLER": "1"})
    try:
        # when the cluster starts again on the same data
        (state,) = cluster.up(("lone",), root)
        assert state.bootstrap == bootstrap
        out, err = reader.communicate(timeout=150)
    finally:
        reader.kill()

    # then the reader waited out the broker's start and its loading coordinator
    assert reader.returncode == 0, f"reader exited {reader.returncode}: {err[-3000:]}"
    assert json.loads(out) == [[TOPIC, p, 200 + p, f"m{p}"] for p in range(3)]


def test_status_says_a_stalled_broker_answers_once_it_answers_within_the_probe_time(
    lone_cluster: tuple[Path, str]
) -> None:
    # given: the cluster's broker stalled (stopped, as a long pause of its JVM or a
    # starved machine would hold it) for longer than a loaded machine's slowest answer
    # seen by the old three-second probe
    root, _ = lone_cluster
    (state,) = cluster.states_in(root)
    assert state.pid is not None
    os.kill(state.pid, signal.SIGSTOP)
    resumed = threading.Timer(STALL_S, os.kill, (state.pid, signal.SIGCONT))
    try:
        resumed.start()
        # when: status probes it
        (row,) = cluster.status(root)
    finally:
        resumed.cancel()
        os.kill(state.pid, signal.SIGCONT)

    # then: running and answering, not "running, not answering"
    assert row["running"] and row["answering"], row


STALL_S = 4.0


def _dead_end() -> str:
    """A loopback address nothing listens on: a cluster that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    ("call", "action"),
    [(lambda admin: admin.committed("billing", [("orders", 0)]),
      "reading offsets of group billing"),
     (lambda admin: admin.watermarks([TP("orders", 0)]),
      "reading log start offsets of orders"),
     (lambda admin: admin.topics(), "listing topics")],
    ids=["group-offsets", "watermarks", "topics"],
)
def test_a_cluster_that_stays_down_fails_the_call_after_the_budget_naming_it(
    call: object, action: str
) -> None:
    admin = Admin(ClientConfig("dr-site", "admin", {"bootstrap.servers": _dead_end()}),
                  retry_seconds=3)

    started = time.monotonic()
    with pytest.raises(RetriesExhausted) as err:
        call(admin)  # type: ignore[operator]
    took = time.monotonic() - started

    assert 3 <= took < 3 + 6, took  # the budget, and one short last attempt at most
    message = str(err.value)
    assert message.startswith(f"cluster dr-site: {action} failed: "), message
    assert "(ferry.kafka.retry.seconds=3)" in message
    assert "still failing after" in message


def test_a_connection_whose_handshake_lists_no_metadata_api_is_replaced_and_topics_listed(
    clusters: dict[str, str], topic_name: str
) -> None:
    # given a broker still starting: its first two connections answer ApiVersions without
    # the Metadata API (librdkafka then refuses every request on them locally)
    create_topic(clusters["target"], topic_name, 2)
    with starting_broker(clusters["target"], crippled=2) as broker:
        admin = Admin(ClientConfig("target", "admin", {"bootstrap.servers": broker.bootstrap}),
                      retry_seconds=30)

        # when
        topics = admin.topics()

        # then: each of them was given up for a new one, and the listing came from the third
        assert broker.served == 2
    assert topics[topic_name].partitions == 2


def test_a_broker_whose_handshakes_never_list_the_metadata_api_fails_after_the_budget(
    clusters: dict[str, str]
) -> None:
    with starting_broker(clusters["target"], crippled=1000) as broker:
        admin = Admin(ClientConfig("dr-site", "admin", {"bootstrap.servers": broker.bootstrap}),
                      retry_seconds=3)

        with pytest.raises(RetriesExhausted) as err:
            admin.topics()

        assert broker.served > 2  # a new connection for each attempt
    message = str(err.value)
    assert message.startswith("cluster dr-site: listing topics failed: "), message
    assert "Required feature not supported by broker" in message


def test_a_missing_topic_fails_at_once(lone_cluster: tuple[Path, str]) -> None:
    _, bootstrap = lone_cluster
    admin = Admin(ClientConfig("lone", "admin", {"bootstrap.servers": bootstrap}))

    started = time.monotonic()
    with pytest.raises(TerminalError, match=r"cluster lone: reading log start offsets of "
                                            r"no-such-topic failed: .*No leaders found"):
        admin.watermarks([TP("no-such-topic", 0)])

    assert time.monotonic() - started < 10  # not the 120 s budget


def test_a_group_the_principal_may_not_read_fails_at_once_naming_the_right(
    secure_clusters: cluster.SecureClusters
) -> None:
    mallory = ClientConfig("ssource", "admin", secure_clusters.client("ssource", "mallory"))

    started = time.monotonic()
    with pytest.raises(TerminalError, match=r"cluster ssource: reading offsets of group "
                                            r"billing failed: .*User:mallory may not DESCRIBE "
                                            r"on GROUP billing"):
        Admin(mallory).committed("billing", [("orders", 0)])

    assert time.monotonic() - started < 10


def test_a_partition_the_broker_answers_with_an_error_is_never_taken_for_no_offset(
    secure_clusters: cluster.SecureClusters
) -> None:
    # given: a group with a committed offset on a topic, and a principal that may describe
    # the group but not the topic (the broker answers that partition with an error)
    from confluent_kafka.admin import AclOperation, ResourceType

    from tests.support.secure_data import acl, admin, grant

    root = admin(secure_clusters, "ssource")
    root.create_topics([NewTopic("ledger-events", 1, 1)])["ledger-events"].result(30)
    committer = Consumer(secure_clusters.client("ssource") | {"group.id": "ledger"})
    committer.commit(offsets=[TopicPartition("ledger-events", 0, 7)], asynchronous=False)
    committer.close()
    grant(secure_clusters, "ssource", [
        acl(ResourceType.GROUP, "ledger", AclOperation.DESCRIBE, "User:alice")])
    alice = ClientConfig("ssource", "admin", secure_clusters.client("ssource", "alice"))

    # when / then: the read fails naming the partition and the right it takes, instead of
    # answering "no offset there" (which would start that partition from scratch)
    with pytest.raises(TerminalError, match=r"cluster ssource: reading the offset of group "
                                            r"ledger on ledger-events-0 failed: .*User:alice "
                                            r"may not DESCRIBE on TOPIC ledger-events"):
        Admin(alice).committed("ledger", [("ledger-events", 0)])


def test_a_refused_login_fails_at_once(secure_clusters: cluster.SecureClusters) -> None:
    settings = secure_clusters.client("ssource", "ferry")
    settings["sasl.password"] = "not-" + settings["sasl.password"]
    admin = Admin(ClientConfig("ssource", "admin", settings))

    started = time.monotonic()
    with pytest.raises(TerminalError, match=r"cluster ssource: reading offsets of group "
                                            r"billing failed: the brokers refused the "
                                            r"connection of User:ferry"):
        admin.committed("billing", [("orders", 0)])

    assert time.monotonic() - started < 15


def test_a_partition_increase_made_again_is_no_error(
    lone_cluster: tuple[Path, str], tmp_path: Path
) -> None:
    # given a topic already grown to 3 partitions (an attempt whose answer was lost)
    _, bootstrap = lone_cluster
    admin = Admin(ClientConfig("lone", "admin", {"bootstrap.servers": bootstrap}))
    admin.create_topics([NewTopic("grown", 3, 1)], lambda name: f"creating {name}")
    flow = flow_config(tmp_path, {"source": bootstrap, "target": bootstrap},
                       "grown").enabled_flows[0]

    # when the same increase is asked again, then it is done, not an error
    apply_topology(flow, admin, TopicActions(create=(), grow=(GrowTopic("grown", 3, 3),)))
    assert admin.topics()["grown"].partitions == 3


def test_the_adapters_answer_as_before_through_the_retrying_admin(
    lone_cluster: tuple[Path, str]
) -> None:
    """Every call now goes through `Admin.retry`/`batch`: on a healthy cluster each still
    returns what it did (a guard for the rewiring, not a transient state)."""
    _, bootstrap = lone_cluster
    admin = Admin(ClientConfig("lone", "admin", {"bootstrap.servers": bootstrap}))

    assert admin.create_topics([NewTopic("adapted", 2, 1)], lambda n: f"creating {n}") == [
        "adapted"]
    assert admin.create_topics([NewTopic("adapted", 2, 1)], lambda n: f"creating {n}") == []
    assert admin.watermarks([TP("adapted", 0)]) == {TP("adapted", 0): Watermarks(0, 0)}

    configs.alter_incremental(admin, [AlterTopicConfig("adapted", "adapted",
                                                       set=(("retention.ms", "123456"),))])
    described = configs.describe_topic_configs(admin, ["adapted", TOPIC])
    assert list(described) == ["adapted", TOPIC]
    assert described["adapted"]["retention.ms"].value == "123456"

    checkpoints = [Checkpoint("translated", "adapted", p, 0, 5 + p, f"up{p}") for p in (0, 1)]
    groups.commit(admin, "translated", checkpoints)
    assert admin.committed("translated") == {("adapted", 0): (5, "up0"),
                                             ("adapted", 1): (6, "up1")}
    assert {"translated", GROUP} <= set(groups.list_groups(admin))
    found = groups.describe(admin, ["translated", "never-seen"])
    assert found == {"translated": TargetGroup("EMPTY", {("adapted", 0): 5, ("adapted", 1): 6}),
                     "never-seen": TargetGroup("ABSENT", {})}

    client = ClientConfig("lone", "admin", {"bootstrap.servers": bootstrap})
    mm2topics.ensure(admin, "adapted.checkpoints.internal", 1, "replication.factor")
    mm2topics.append(client, "adapted.checkpoints.internal", [(b"k", b"v", 1_700_000_000_000)])
    assert mm2topics.read_all(client, "adapted.checkpoints.internal", "reader") == [
        mm2topics.Record(0, b"k", b"v", 1_700_000_000_000)]


def test_the_offsets_of_a_topic_just_created_answer_at_once(
    clusters: dict[str, str], topic_name: str
) -> None:
    """Right after a topic is created, librdkafka's ListOffsets may find no leader in the
    metadata it cached (`_NOENT`, "No leaders found") and keep failing so until the
    metadata is refreshed: reproduced here in 4 of 80 creations, stuck for the whole
    retry budget, so the call failed after 120 s. A Ferry Admin returns from a creation
    once every new partition has a leader, and refreshes the metadata of a topic whose
    offsets fail so before asking again."""
    client = ClientConfig("target", "admin", {"bootstrap.servers": clusters["target"]})
    admin = Admin(client)
    for i in range(40):
        topic = f"{topic_name}-{i}"
        assert admin.create_topics([NewTopic(topic, 2, 1)], lambda n: f"creating {n}") == [
            topic]
        assert admin.ends([TP(topic, 0), TP(topic, 1)]) == {TP(topic, 0): 0, TP(topic, 1): 0}


class CountingListings:
    """A real AdminClient whose metadata requests are counted."""

    def __init__(self, raw: AdminClient) -> None:
        self.raw, self.by_name, self.whole = raw, 0, 0

    def list_topics(self, *args: object, **kwargs: object) -> object:
        if kwargs.get("topic"):
            self.by_name += 1
        else:
            self.whole += 1
        return self.raw.list_topics(*args, **kwargs)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.raw, name)


def test_many_topics_created_at_once_are_waited_for_in_a_few_listings_not_one_request_each(
    clusters: dict[str, str], topic_name: str
) -> None:
    """A sync that creates many remote topics waits for their leaders: asking about each
    by name cost one metadata request per topic, each attempt again. Beyond a few, one
    listing of the cluster's topics answers for all of them, and a topic found led is not
    asked about again."""
    client = ClientConfig("target", "admin", {"bootstrap.servers": clusters["target"]})
    admin = Admin(client)
    counted = CountingListings(admin.raw)
    admin._admin = counted  # type: ignore[assignment]
    names = [f"{topic_name}-{i}" for i in range(30)]
    created = admin.create_topics([NewTopic(n, 2, 1) for n in names], lambda n: f"creating {n}")
    assert sorted(created) == sorted(names)
    assert counted.by_name == 0 and 1 <= counted.whole <= 10, (counted.by_name, counted.whole)
    tps = [TP(n, p) for n in names for p in (0, 1)]
    assert admin.ends(tps) == dict.fromkeys(tps, 0)


def test_an_mm2_topic_just_created_is_said_so_and_reads_empty(
    clusters: dict[str, str], topic_name: str
) -> None:
    """The checkpoints step created `<source>.checkpoints.internal` and read it back at
    once; a consumer asked right after the creation may not know it yet (seen in CI:
    `_UNKNOWN_PARTITION` reading the checkpoints of a flow's first run). `ensure` says it
    created the topic, so its creator need not read it, and returns once it has a
    leader."""
    client = ClientConfig("target", "admin", {"bootstrap.servers": clusters["target"]})
    for i in range(20):
        topic = f"{topic_name}-{i}.checkpoints.internal"
        admin = Admin(client)
        assert mm2topics.ensure(admin, topic, 1, "replication.factor") is True
        assert mm2topics.ensure(admin, topic, 1, "replication.factor") is False
        assert mm2topics.read_all(client, topic, "reader") == [], topic

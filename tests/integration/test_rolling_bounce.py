"""Kafka's own transactions system test with Ferry as the copier: records stream into the
source while Ferry mirrors continuously on the warm Spark, and every node of the target,
then of the source, is restarted once, one at a time, hard (SIGKILL) and clean (SIGTERM) in
turn, each time waiting until every partition is fully replicated again (`bench/bounce.py`
restarts each node both ways, with MirrorMaker 2 beside Ferry). The continuous run rides
through (leaders moving, coordinators moving, too few in-sync replicas are waited out: no
cycle fails, the process is never restarted) and every record is on the target once, in
order."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from ferry.local import cluster
from tests.support import stacks
from tests.support.kafka_data import assert_exact, create_topic, flow_config
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
SIGTERM_WAIT_S = 360


def stream(bootstrap: str, topic: str, per_second: int, stop: threading.Event,
           sent: list[int]) -> None:
    """Produce numbered records round-robin over the partitions at about `per_second`, with
    an idempotent producer (acks=all) that rides through the source's own bounces."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "log_level": 0})
    i = 0
    started = time.monotonic()
    while not stop.is_set():
        producer.produce(topic, value=f"record-{i}".encode(), key=str(i).encode(),
                         partition=i % PARTITIONS)
        i += 1
        producer.poll(0)
        ahead = i / per_second - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    assert producer.flush(120) == 0, "the source never took every record"
    sent.append(i)


def test_continuous_mirroring_rides_through_rolling_restarts_of_both_clusters_exactly_once(
    replicated_clusters: dict[str, str], connect_url: str, topic_name: str, tmp_path: Path
) -> None:
    clusters = replicated_clusters
    create_topic(clusters["source"], topic_name, PARTITIONS)
    config = flow_config(tmp_path, clusters, topic_name, "ferry.transaction.max.records = 500\n",
                         replicas=3)
    flow = config.enabled_flows[0]
    stop, sent = threading.Event(), list[int]()
    producer = threading.Thread(target=stream, daemon=True,
                                args=(clusters["source"], topic_name, 300, stop, sent))
    producer.start()
    reports = tmp_path / "cycles.jsonl"
    with open(reports, "w") as out, open(tmp_path / "ferry.err", "w") as err:
        ferry = subprocess.Popen(
            [str(Path(sys.executable).parent / "ferry"), "mirror", config.path, "--flow",
             flow.name, "--continuous", "--master", connect_url, "--json"],
            stdout=out, stderr=err, cwd=ROOT)
    try:
        wait_for_cycles(reports, ferry, 2)
        # given Ferry mirroring a live stream, when every node of each cluster is restarted
        # in turn, hard and clean by turns, each once the cluster is whole again
        durations = []
        for turn, (alias, node) in enumerate((a, n) for a in ("target", "source")
                                             for n in (1, 2, 3)):
            durations.append(cluster.bounce_node(Path(clusters["root"]), alias, node,
                                                 hard=turn % 2 == 0, timeout=180))
            assert ferry.poll() is None, failure(tmp_path, "the continuous run ended")
        print("bounces took", [round(d, 1) for d in durations], "s")
        stop.set()
        producer.join(150)
        # then the same process, never restarted, catches up: a cycle finds nothing left
        stopped_at = len(read_reports(reports))
        deadline = time.monotonic() + 180
        while not any(r.get("idle") for r in read_reports(reports)[stopped_at + 1:]):
            assert ferry.poll() is None, failure(tmp_path, "the continuous run ended")
            assert time.monotonic() < deadline, hung(tmp_path, ferry,
                                                     "Ferry never caught up after the bounces")
            time.sleep(0.5)
    finally:
        stop.set()
        ferry.send_signal(signal.SIGTERM)  # stops after the running cycle
        try:
            # The running cycle's commit may wait out a coordinator for its whole retry
            # budget twice (sending its positions, then committing): 2 x (120 s + the
            # call's 60 s timeout). A run still going after that is hung.
            code = ferry.wait(SIGTERM_WAIT_S)
        except subprocess.TimeoutExpired:
            message = hung(tmp_path, ferry, "the continuous run did not stop on SIGTERM")
            ferry.kill()
            raise AssertionError(message) from None
    assert code == 0, failure(tmp_path, f"exit code {code}")
    assert sent and sent[0] > 0
    # and every record is on the target once, in order, with the offset map pointing at it
    assert_exact(flow, clusters, topic_name, PARTITIONS)
    assert all(r.get("job_exit_code", 0) == 0 for r in read_reports(reports))


def test_a_writer_whose_positions_coordinator_restarted_cleanly_replaces_its_stuck_producer(
    replicated_clusters: dict[str, str], topic_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given: a writer that committed its first transaction (its producer now knows the
    # positions group's coordinator) and holds its second one open
    from ferry.core.internal import positions_group
    from ferry.core.lanes import by_writer
    from ferry.steps.plan import prepare
    from tests.support.kafka_data import paused_writer, produce

    clusters = replicated_clusters
    create_topic(clusters["source"], topic_name, PARTITIONS)  # leaders on every node
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), i % PARTITIONS) for i in range(1_500)])
    flow = flow_config(tmp_path, clusters, topic_name,  # one writer for all partitions
                       "ferry.transaction.max.records = 600\nferry.writers = 1\n",
                       replicas=3).enabled_flows[0]
    (ranges,) = by_writer(prepare(flow, run_id="stuck").plan.ranges,
                          flow.ferry.writers).values()
    writer, _, release, failures = paused_writer(flow, ranges, "stuck", "second-commit")

    # when: the node that is the positions group's coordinator stops cleanly and leaves
    # the cluster's metadata (librdkafka retires the broker it cached as coordinator), the
    # writer commits, and the node comes back as a rolling restart brings it back
    from ferry.local.layout import states_in
    from ferry.local.probe import registered
    from ferry.local.process import start_node, stop_node

    group = positions_group(flow)
    admin = AdminClient({"bootstrap.servers": clusters["target"]})
    coordinator = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
    (state,) = [s for s in states_in(Path(clusters["root"])) if s.alias == "target"]
    state = stop_node(state, coordinator)
    wait_until(lambda: registered(clusters["target"]) < 3, "the node left the metadata", 120)
    assert writer.producer is not None  # it learns the node is gone, as on its next refresh
    assert len(writer.producer.list_topics(timeout=10).brokers) == 2
    release.set()
    time.sleep(2)  # the commit is under way while the node is away
    state = start_node(state, coordinator)
    whole_again(clusters["target"], 120)
    writer.thread.join(90)  # type: ignore[attr-defined]

    # then: the commit that never returned is abandoned, a new producer of the same id
    # copies the batch again, and every record is on the target once
    assert not writer.thread.is_alive(), (  # type: ignore[attr-defined]
        "the writer is still inside send_offsets_to_transaction")
    assert failures == [] and writer.replaced >= 1
    assert sum(r.records for r in writer.results) == 1_500
    assert_exact(flow, clusters, topic_name, PARTITIONS)


def test_a_remote_partition_short_of_in_sync_replicas_in_a_restart_is_waited_out_exactly_once(
    replicated_clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from confluent_kafka.admin import NewTopic

    from ferry.local.layout import states_in
    from ferry.local.probe import registered, under_replicated
    from ferry.local.process import start_node, stop_node
    from tests.support.kafka_data import produce, run_cycle

    # given: a remote partition on nodes 1 and 2 of the target, both needed in sync
    # (min.insync.replicas 2), and the target's producer giving up on a record after 2 s
    # (it does after the transaction timeout, 60 s by default)
    clusters = replicated_clusters
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(b"k", f"v{i}".encode(), 0) for i in range(10)])
    target = flow_config(tmp_path, clusters, topic_name, replicas=3).enabled_flows[0].target
    flow = flow_config(tmp_path, clusters, topic_name,
                       f"{target}.producer.delivery.timeout.ms = 2000\n",
                       replicas=3).enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    admin = AdminClient({"bootstrap.servers": clusters["target"]})
    admin.create_topics([NewTopic(remote, 1, replica_assignment=[[1, 2]],
                                  config={"min.insync.replicas": "2"})])[remote].result(30)
    wait_until(lambda: under_replicated(clusters["target"]) == 0, "the remote topic is led", 60)

    # when: node 2 crashes (the partition has one replica in sync: every acks=all write is
    # answered NOT_ENOUGH_REPLICAS and times out), a cycle copies meanwhile, and the node
    # is started again once the cycle's first batch has timed out
    (state,) = [s for s in states_in(Path(clusters["root"])) if s.alias == "target"]
    state = stop_node(state, 2, hard=True)
    wait_until(lambda: registered(clusters["target"]) < 3, "the node left the metadata", 120)
    timed_out = threading.Event()
    restart = threading.Thread(target=lambda: timed_out.wait(180) and start_node(state, 2))
    restart.start()
    with on_log("ferry.kafka.lane", "copying the batch again", timed_out):
        try:
            copied = run_cycle(flow)
        finally:
            timed_out.set()  # the node comes back whatever happened
            restart.join()
            whole_again(clusters["target"])

    # then: the cycle waited it out, its timed-out batches aborted and copied again by new
    # producers of the id, and every record is on the target once, in order
    assert copied == 10
    assert_exact(flow, clusters, topic_name, 1)


def test_an_offsets_look_up_whose_leader_was_killed_is_answered_by_the_next_leader_in_seconds(
    replicated_clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # a plan's offsets request queued for a SIGKILLed leader waited its whole 30 s (or until
    # the node came back) while the cluster had a new leader after 3 s: in the bounce
    # bench, a cycle planned for 30 s
    from confluent_kafka.admin import NewTopic

    from ferry.core.planner import TopicPartition as TP
    from ferry.kafka.admin import Admin
    from ferry.local.layout import states_in
    from ferry.local.probe import under_replicated
    from ferry.local.process import start_node, stop_node
    from tests.support.kafka_data import produce

    # given: a source partition led by node 2, its offsets read once (the client's metadata
    # names node 2 as its leader)
    clusters = replicated_clusters
    raw = AdminClient({"bootstrap.servers": clusters["source"]})
    raw.create_topics([NewTopic(topic_name, 1, replica_assignment=[[2, 1, 3]])]
                      )[topic_name].result(30)
    wait_until(lambda: under_replicated(clusters["source"]) == 0, "the topic is led", 60)
    produce(clusters["source"], topic_name, [(b"k", f"v{i}".encode(), 0) for i in range(10)])
    flow = flow_config(tmp_path, clusters, topic_name, replicas=3).enabled_flows[0]
    admin = Admin(flow.source_admin)
    tp = TP(topic_name, 0)
    assert admin.ends([tp]) == {tp: 10}

    # when: node 2 is SIGKILLed, and the offsets are read again at once
    (state,) = [s for s in states_in(Path(clusters["root"])) if s.alias == "source"]
    state = stop_node(state, 2, hard=True)
    try:
        asked = time.monotonic()
        found = admin.ends([tp])
        took = time.monotonic() - asked
    finally:
        start_node(state, 2)
        whole_again(clusters["source"])

    # then: the next leader answered, within seconds (the brokers fence a silent node
    # after 3 s here), not after the request's whole timeout
    assert found == {tp: 10}
    assert took < 20, f"the look-up took {took:.1f}s"


def whole_again(bootstrap: str, timeout: float = 180) -> None:
    """Wait until all three nodes of the cluster are registered and every partition is
    fully replicated."""
    from ferry.local.probe import registered, under_replicated

    wait_until(lambda: registered(bootstrap) == 3 and under_replicated(bootstrap) == 0,
               "the cluster is whole again", timeout)


@contextlib.contextmanager
def on_log(logger: str, text: str, event: threading.Event) -> Iterator[None]:
    """Set `event` when `logger` logs a message containing `text` (a step of the code
    under test that a test waits for, to force an interleaving)."""
    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if text in record.getMessage():
                event.set()

    handler, log = Seen(), logging.getLogger(logger)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)


def read_reports(path: Path) -> list[dict[str, object]]:
    """The cycles reported so far (one JSON object per line)."""
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def wait_for_cycles(path: Path, ferry: subprocess.Popen[bytes], count: int) -> None:
    deadline = time.monotonic() + 180
    while len(read_reports(path)) < count:
        assert ferry.poll() is None, failure(path.parent, "the continuous run ended")
        assert time.monotonic() < deadline, "no cycle finished"
        time.sleep(0.2)


def hung(tmp: Path, ferry: subprocess.Popen[bytes], what: str) -> str:
    """`failure`, with what every thread of the continuous run and of the Spark server's
    Python workers (the lanes) waits on; the whole dump is also left in `stacks.txt`."""
    dumped = stacks.dump([ferry.pid, *stacks.spark_python_workers()])
    (tmp / "stacks.txt").write_text(dumped)
    return failure(tmp, what) + "\nstacks:\n" + dumped


def failure(tmp: Path, what: str) -> str:
    """`what`, with the last cycle the continuous run reported (a failed one says why) and
    the last of Ferry's own warnings and errors on stderr (librdkafka's connection lines,
    many during a bounce, left out)."""
    cycles = (tmp / "cycles.jsonl").read_text(errors="replace").splitlines()
    # the final report of a failed run spans several lines: from its opening brace
    final = max((i for i, line in enumerate(cycles) if line.startswith("{")), default=0)
    lines = [line for line in (tmp / "ferry.err").read_text(errors="replace").splitlines()
             if "ferry.kafka.librdkafka" not in line and "rdkafka#" not in line]
    return (what + ":\nlast cycle: " + ("\n".join(cycles[final:]) if cycles else "none") + "\n"
            + "\n".join(lines[-15:]))

"""The copy lane against real brokers: exact, in order, exactly once, across gaps."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from ferry.config import Flow
from ferry.core.internal import offset_map_topic
from ferry.core.lanes import by_writer
from ferry.core.offsetmap import decode, lookup
from ferry.core.planner import TopicPartition as TopicPartition_
from ferry.core.tables import runs_from_entries
from ferry.errors import TerminalError, TransientError
from ferry.kafka.lane import Lane
from ferry.steps.clusters import Cluster
from ferry.steps.plan import prepare
from tests.support.kafka_data import (
    COMPACTION_EXCLUDE,
    assert_exact,
    compacted_topic,
    create_topic,
    flow_config,
    produce,
    produce_transactions,
    read_all,
    run_cycle,
    wait_lso,
    written,
)

pytestmark = pytest.mark.integration


def test_copies_records_with_headers_null_keys_tombstones_and_timestamps(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 3)
    records = [(None if i % 7 == 0 else f"k{i}".encode(),
                None if i % 11 == 0 else f"value-{i}".encode(), i % 3) for i in range(600)]
    produce(clusters["source"], topic_name, records)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]

    assert run_cycle(flow) == 600

    assert_exact(flow, clusters, topic_name, 3)
    assert run_cycle(flow, "second") == 0  # nothing new: nothing copied again


def test_second_run_copies_only_what_is_new(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(b"a", b"1", 0), (b"b", b"2", 1)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    assert run_cycle(flow) == 2
    produce(clusters["source"], topic_name, [(b"c", b"3", 0)] * 5)
    assert prepare(flow, apply=False).plan.span == 5
    assert run_cycle(flow) == 5
    assert prepare(flow, apply=False).plan.is_idle
    assert_exact(flow, clusters, topic_name, 2)


def test_transactional_source_skips_aborted_records_and_maps_across_markers(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce_transactions(clusters["source"], topic_name,
                         [(10, True), (5, False), (3, True), (1, True), (4, False), (2, True)],
                         tid=topic_name)
    wait_lso(clusters["source"], topic_name, 0, 31)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]

    assert run_cycle(flow) == 16

    target = read_all(clusters["target"], flow.remote_topic(topic_name), 0)
    assert [r.value for r in target] == [f"txn-{n}".encode() for n in
                                         [*range(10), *range(15, 19), *range(23, 25)]]
    assert_exact(flow, clusters, topic_name, 1)


def test_small_transactions_split_a_range_and_stay_exact(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(b"k", str(i).encode(), i % 2) for i in range(5000)])
    flow = flow_config(tmp_path, clusters, topic_name,
                       "ferry.transaction.max.records = 700\nferry.range.max.records = 1100\n"
                       ).enabled_flows[0]
    prepared = prepare(flow)
    assert len(prepared.plan.ranges) == 6  # 2500 per partition, in ranges of 1100
    assert run_cycle(flow) == 5000
    assert_exact(flow, clusters, topic_name, 2)
    # no transaction carried more than its limit, though one fetch brings more records
    entries = [decode(r.value) for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    assert max(e.records for e in entries) <= 700
    assert sum(e.records for e in entries) == 5000


def test_compacted_topic_maps_exactly_across_compaction_holes(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    compacted_topic(clusters["source"], topic_name)
    flow = flow_config(tmp_path, clusters, topic_name, COMPACTION_EXCLUDE).enabled_flows[0]

    run_cycle(flow)

    source = read_all(clusters["source"], topic_name, 0)
    assert any(b.offset - a.offset > 1 for a, b in itertools.pairwise(source))  # holes
    assert any(r.value is None for r in source)  # tombstones kept
    assert_exact(flow, clusters, topic_name, 1)


@pytest.mark.parametrize(
    ("kill_at", "how"),
    [pytest.param([0.3], "cycle", id="once"),
     pytest.param([0.15, 0.6], "cycle", id="twice"),
     pytest.param([0.4], "spark-job", id="spark-job", marks=pytest.mark.spark_submit),
     pytest.param([0.3], "continuous", id="continuous-once"),
     pytest.param([0.15, 0.6], "continuous", id="continuous-twice"),
     pytest.param([0.3], "continuous-spark-lanes", id="continuous-spark-lanes")],
)
def test_killed_mid_copy_then_rerun_leaves_every_record_exactly_once(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, kill_at: list[float], how: str,
    request: pytest.FixtureRequest
) -> None:
    create_topic(clusters["source"], topic_name, 4)
    total = 200_000
    produce(clusters["source"], topic_name,
            [(f"k{i}".encode(), f"value-{i:08d}".encode() * 8, i % 4) for i in range(total)])
    # continuous: the loop's lanes are kept in its process (the local runner, a loop's
    # default), or run as tasks of the warm server, where they outlive the killed client
    # (a spark-job run's plan is small enough for the local runner by default)
    runner = "spark" if how in ("continuous-spark-lanes", "spark-job") else "auto"
    how = how.removesuffix("-spark-lanes")
    config = flow_config(tmp_path, clusters, topic_name, "ferry.transaction.max.records = 3000\n"
                         f"ferry.copy.runner = {runner}\n")
    flow = config.enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    ferry = [str(Path(sys.executable).parent / "ferry"), "mirror", config.path, "--flow",
             flow.name]
    command = {"cycle": [sys.executable, "-m", "tests.integration.cycle_main", config.path,
                         flow.name],
               "spark-job": ferry,
               # with spark lanes, the lanes run in the warm server's workers: they outlive
               # the killed client until the next cycle's lanes fence them
               "continuous": [*ferry, "--continuous", "--master",
                              request.getfixturevalue("connect_url")]
               if how == "continuous" else []}[how]
    for fraction in kill_at:
        # given a cycle (in-process lanes, the spark-submit job, or back-to-back cycles on
        # the warm Spark) in its own process group
        child = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL,
                                 cwd=Path(__file__).resolve().parents[2])
        # when the whole group is SIGKILLed once a fraction of the records is written
        deadline = time.monotonic() + 180
        watcher = Consumer({"bootstrap.servers": clusters["target"],
                            "group.id": "ferry-test-hwm", "isolation.level": "read_uncommitted"})
        try:
            while written(clusters["target"], remote, 4, watcher) < fraction * total:
                assert child.poll() is None, "the cycle ended before the kill point"
                assert time.monotonic() < deadline
                time.sleep(0.005)
        finally:
            with contextlib.suppress(ProcessLookupError):  # ended early: asserted above
                os.killpg(child.pid, signal.SIGKILL)
            watcher.close()
        child.wait()
    assert written(clusters["target"], remote, 4) < total, "the kill must land mid-copy"

    # then a new cycle completes the copy, and read_committed readers see each record once.
    # Killed on the warm server, the old job's lanes live on and take their next writer
    # slots, fencing this cycle's (the newest writer wins, and reads the position after
    # taking its slot, so nothing is doubled): this cycle fails as fenced and is retried, as
    # Airflow retries the task, until the old job has ended.
    for attempt in itertools.count(1):
        try:
            run_cycle(flow, f"after-crash-{attempt}")
            break
        except TransientError as exc:
            assert how == "continuous" and attempt < 10, exc
            assert "was taken by a newer writer" in str(exc), exc
            time.sleep(2)

    assert_exact(flow, clusters, topic_name, 4)
    assert prepare(flow, apply=False).plan.is_idle


class CommitsBeforeRemoteRead:
    """The target, with another writer of the flow (a killed client's lanes still running on
    a Spark server) committing its first transaction after the plan found neither a position
    nor an offset-map entry, just before it looks at the remote partitions: forced, not
    hoped for."""

    def __init__(self, target: Cluster, bootstrap: str, remote: str,
                 writer: Callable[[], object]) -> None:
        self.target, self.bootstrap, self.remote, self.writer = target, bootstrap, remote, writer
        self.fired = False

    def watermarks(self, tps: Iterable[TopicPartition_]) -> object:
        tps = list(tps)
        if not self.fired and any(tp.topic == self.remote for tp in tps):
            self.fired = True
            self.writer()
            # its commit markers landed too: the plan sees the records as committed
            ends = self.target.ends(tps)
            for tp in tps:
                wait_lso(self.bootstrap, tp.topic, tp.partition, ends[tp])
        return self.target.watermarks(tps)

    def __getattr__(self, name: str) -> object:
        return getattr(self.target, name)


def test_a_run_killed_inside_its_commit_leaves_the_next_plan_nothing_to_wait_for(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a run SIGKILLed inside its first commit, its records and positions sent to its
    # transaction and not committed (pending in the positions group until the transaction
    # times out: a minute at least), and a flow whose Kafka calls may wait 5 s
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), i % 2) for i in range(400)])
    config = flow_config(tmp_path, clusters, topic_name, "ferry.kafka.retry.seconds = 5\n")
    flow = config.enabled_flows[0]
    marker = tmp_path / "held-in-commit"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.cycle_main", config.path, flow.name,
         "--hold-in-commit", str(marker)], start_new_session=True,
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()

    # when: the next cycle plans (a stable read of the positions waited for the dead
    # transaction, past the 5 s, and failed) and copies
    prepared = prepare(flow, run_id="after-kill")
    copied = sum(Lane(flow, ranges, "after-kill").run().records
                 for ranges in by_writer(prepared.plan.ranges, flow.ferry.writers).values())

    # then: the plan started where the last commit left the flow (nothing committed), the
    # lanes fenced the dead writer (its transaction aborted), and every record is there once
    assert sorted((r.partition, r.start) for r in prepared.plan.copies) == [(0, 0), (1, 0)]
    assert copied == 400
    assert_exact(flow, clusters, topic_name, 2)


def test_a_run_planned_while_a_zombie_commits_its_first_batch_is_not_refused_and_stays_exact(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given a flow over a topic it never copied, and a zombie lane holding its whole plan
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), b"v", i % 2) for i in range(400)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    zombie = prepare(flow, run_id="zombie")

    def zombie_commits() -> None:
        for ranges in by_writer(zombie.plan.ranges, flow.ferry.writers).values():
            Lane(flow, ranges, "zombie").run()

    # when the next run's plan finds no position and no map entry, and the zombie then
    # commits records, entries and positions before the plan looks at the remote partitions
    target = CommitsBeforeRemoteRead(Cluster(flow.target_admin), clusters["target"],
                                     flow.remote_topic(topic_name), zombie_commits)
    prepared = prepare(flow, run_id="next", target=target)  # type: ignore[arg-type]

    # then the records are known as the flow's own: nothing is refused; and the lanes,
    # which read the positions again once they hold their writer ids, continue after the
    # zombie's (a partition whose commit markers the plan did not see yet is planned from
    # its start and skipped there), so nothing is copied twice
    assert target.fired
    for ranges in by_writer(prepared.plan.ranges, flow.ferry.writers).values():
        Lane(flow, ranges, prepared.run_id).run()
    assert_exact(flow, clusters, topic_name, 2)
    assert prepare(flow, apply=False).plan.is_idle


def refusing_target(clusters: Mapping[str, str], topic_name: str, tmp_path: Path) -> Flow:
    """A flow over 10 source records whose remote topic refuses the one at offset 5. The
    remote topic exists already, with a smaller record limit than the source's, which
    config sync would revert (the source has the default): kept by excluding the key."""
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name,
            [(b"k", b"x" * (20_000 if i == 5 else 10), 0) for i in range(10)])
    flow = flow_config(tmp_path, clusters, topic_name,
                       "config.properties.exclude = max\\.message\\.bytes\n").enabled_flows[0]
    create_topic(clusters["target"], flow.remote_topic(topic_name), 1,
                 {"max.message.bytes": "10000"})
    return flow


def test_a_record_the_target_refuses_fails_the_run_naming_topic_partition_offset(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    flow = refusing_target(clusters, topic_name, tmp_path)

    with pytest.raises(TerminalError) as err:
        run_cycle(flow)

    message = str(err.value)
    assert (f"cluster {flow.target} refused the record of {topic_name}-0 at source offset 5"
            in message)
    assert read_all(clusters["target"], flow.remote_topic(topic_name), 0) == []  # nothing half


def test_a_failed_range_counts_only_what_was_committed_not_what_was_read(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: 10 records in one transaction, the target refusing the one at offset 5
    flow = refusing_target(clusters, topic_name, tmp_path)
    prepared = prepare(flow, run_id="refused")
    lane = Lane(flow, prepared.plan.ranges, "refused")

    # when: the lane reads them all (twice: once more one by one to name the refusal)
    with pytest.raises(TerminalError):
        lane.run()

    # then: its runs row says what is on the target, nothing: the transaction aborted
    (result,) = lane.results
    assert (result.outcome, result.records, result.bytes) == ("failed", 0, 0)
    assert result.seconds > 0


@pytest.mark.parametrize("refusal_known", ["at-commit", "before-positions"])
def test_a_refused_start_marker_of_an_empty_partition_fails_as_a_ferry_error_naming_it(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, refusal_known: str,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: an empty source partition (its first cycle records only where copying starts,
    # in a transaction of offset-map entries alone) and an offset-map topic whose record
    # limit refuses every entry; the broker's refusal reaching the producer either when
    # the transaction commits or already before its positions are sent (a quick broker,
    # a slow lane: a CI run saw the second, and its error read as a terminal one)
    import ferry.kafka.stuck as stuck
    from ferry.errors import TransientError

    if refusal_known == "before-positions":
        send_offsets = stuck.send_offsets

        def refused_first(producer: Any, *args: Any) -> None:
            producer.flush(30)  # the refused entry's report is in before the positions go
            send_offsets(producer, *args)

        monkeypatch.setattr(stuck, "send_offsets", refused_first)
    create_topic(clusters["source"], topic_name, 1)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    create_topic(clusters["target"], offset_map_topic(flow), 1,
                 {"max.message.bytes": "64", "retention.ms": "-1"})

    # when: the cycle runs
    with pytest.raises(TransientError) as err:
        run_cycle(flow)

    # then: a Ferry error (a retry may succeed once the topic is fixed), naming the step,
    # the partition, the offset-map topic and the broker's refusal; no position committed
    message = str(err.value)
    assert (f"recording the start positions of {topic_name}-0 in {offset_map_topic(flow)} "
            "failed" in message)
    assert "MSG_SIZE_TOO_LARGE" in message or "too large" in message.lower()
    assert prepare(flow, apply=False, restore=False).positions[
        TopicPartition_(topic_name, 0)] is None


def test_at_least_once_commits_no_position_over_an_offset_map_entry_the_target_refused(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: an at_least_once flow (no transaction to fail) whose offset-map topic refuses
    # every entry
    from ferry.errors import FerryError

    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(20)])
    flow = flow_config(tmp_path, clusters, topic_name,
                       "ferry.delivery = at_least_once\n").enabled_flows[0]
    create_topic(clusters["target"], offset_map_topic(flow), 1,
                 {"max.message.bytes": "64", "retention.ms": "-1"})

    # when: the cycle runs
    with pytest.raises(FerryError) as err:
        run_cycle(flow)

    # then: it fails naming the refused entry, and the position stays where copying
    # started, not past records the offset map cannot translate (the next run copies them
    # again: at least once)
    assert f"refused the offset-map entry of {topic_name}-0" in str(err.value)
    assert prepare(flow, apply=False, restore=False).positions[
        TopicPartition_(topic_name, 0)] == 0


def test_at_least_once_keeps_what_was_acknowledged_before_a_refused_record(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: an at_least_once flow whose target refuses the record at source offset 50
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name,
            [(f"k{i}".encode(), b"x" * (20_000 if i == 50 else 10), 0) for i in range(80)])
    flow = flow_config(tmp_path, clusters, topic_name,
                       "config.properties.exclude = max\\.message\\.bytes\n"
                       "ferry.delivery = at_least_once\n").enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    create_topic(clusters["target"], remote, 1, {"max.message.bytes": "10000"})

    # when: two runs meet the refusal
    for run in ("first", "second"):
        with pytest.raises(TerminalError, match="at source offset 50") as err:
            run_cycle(flow, run)
        assert "the next run starts at it" in str(err.value)

    # then: the records before it were written once, not once per run, and the flow's
    # position stops at the refused record
    keys = [r.key for r in read_all(clusters["target"], remote, 0)]
    before = [f"k{i}".encode() for i in range(50)]
    assert [k for k in keys if k in before] == before
    assert prepare(flow, apply=False, restore=False).positions[
        TopicPartition_(topic_name, 0)] == 50


def test_an_unreachable_cluster_is_named_with_what_to_check() -> None:
    from ferry.config.clients import ClientConfig
    from ferry.errors import TransientError
    from ferry.kafka.admin import Admin

    admin = Admin(ClientConfig("dr-site", "admin", {"bootstrap.servers": "127.0.0.1:1"}), 3,
                  retry_seconds=3)
    with pytest.raises(TransientError, match=r"cluster dr-site: listing topics failed: .*"
                                             r"reachable at its bootstrap.servers"):
        admin.topics()


def test_at_least_once_copies_exactly_and_counts_a_crashed_batch_as_duplicates(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    total = 100_000
    produce(clusters["source"], topic_name,
            [(f"k{i}".encode(), f"value-{i:08d}".encode() * 8, i % 2) for i in range(total)])
    config = flow_config(tmp_path, clusters, topic_name,
                         "ferry.delivery = at_least_once\n"
                         # one batch per lane: any kill before the end lands mid-batch
                         "ferry.transaction.max.records = 100000\n"
                         "ferry.transaction.max.seconds = 300\n")
    flow = config.enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.cycle_main", config.path, flow.name,
         "--hold-first-commit"],  # the kill lands mid-batch however fast the copy runs
        start_new_session=True, cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while written(clusters["target"], remote, 2) < 0.3 * total:
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(child.pid, signal.SIGKILL)  # mid-batch: written, positions not committed
    child.wait()
    written_before = written(clusters["target"], remote, 2)

    prepared = prepare(flow, run_id="after-crash")
    results = [r for ranges in by_writer(prepared.plan.ranges, flow.ferry.writers).values()
               for r in Lane(flow, ranges, "after-crash").run().ranges]

    on_target = sum(len(read_all(clusters["target"], remote, p)) for p in range(2))
    duplicates = sum(r.duplicates for r in results)
    assert on_target == total + duplicates  # every record at least once; extras counted
    assert 0 < duplicates <= written_before  # only what the unfinished batches wrote
    # the offset map points every source offset at an identical copy on the target
    entries = [decode(r.value) for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    # and they travel in the run's offset-map entries: a runs row rebuilt from them (its
    # job killed between the target's commit and the Delta write) counts them too
    rebuilt = runs_from_entries([e for e in entries if e.run_id == "after-crash"], set(),
                                flow.ferry.delivery)
    assert sum(r["duplicates"] for r in rebuilt) == duplicates
    for p in range(2):
        source = read_all(clusters["source"], topic_name, p)
        target = {r.offset: r for r in read_all(clusters["target"], remote, p)}
        latest = {e.covered_start: e for e in entries
                  if e.source_topic == topic_name and e.source_partition == p}
        mine = sorted(latest.values(), key=lambda e: e.covered_start)
        for record in source[::97]:
            found = lookup(mine, record.offset)
            assert found is not None and found[1] is not None
            assert target[found[1]].content() == record.content()

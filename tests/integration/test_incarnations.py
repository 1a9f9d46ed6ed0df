"""Topic identity on real brokers (G10): a remote topic deleted and refilled, or a recreated
offset-map topic, is a new incarnation; look-ups, translation and recording read only the
current one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from ferry.core.internal import offset_map_topic
from ferry.core.tables import StatePaths
from ferry.kafka.mapreader import STABLE_WAIT_S
from ferry.runtime.recording import record_offset_map, settle_entries
from ferry.spark.copy_job import spark_append
from ferry.state.reader import rows
from ferry.steps.checkpoints import run as checkpoints
from ferry.steps.lookup import find
from tests.support.failover import SYNC, commit_source
from tests.support.kafka_data import create_topic, flow_config, produce, read_all, run_cycle

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def _delete(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} was never deleted"
        time.sleep(0.5)


def test_entries_of_a_deleted_remote_topic_never_answer_for_its_refill(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: offsets 0..99 mirrored in two transactions (entries 0..49 and 50..99), then
    # the remote topic is lost and the source's retention has moved past 50
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(100)])
    flow = flow_config(tmp_path, clusters, topic_name,
                       SYNC + "ferry.transaction.max.records = 50\n").enabled_flows[0]
    run_cycle(flow)
    _delete(clusters["target"], flow.remote_topic(topic_name))
    source = AdminClient({"bootstrap.servers": clusters["source"]})
    source.delete_records([TopicPartition(topic_name, 0, 50)])[
        TopicPartition(topic_name, 0, 50)].result(30)

    # when: the next cycle creates the remote topic again and fills it from what is left
    assert run_cycle(flow, "refill") == 50

    # then: a source offset only the lost topic held is not mirrored (the old entry would
    # send it to offset 10 of the new topic, which holds source offset 60) ...
    assert find(flow, topic_name, 0, 10).status == "not-mirrored"
    answer = find(flow, topic_name, 0, 60)
    assert (answer.status, answer.target_offset) == ("mirrored", 10)
    remote = read_all(clusters["target"], flow.remote_topic(topic_name), 0)
    assert remote[10].value == b"v60"
    # ... and a group that had read up to 10 fails over to the first record still there
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: 10})
    (translation,) = checkpoints(flow).translations
    assert translation.target_offset == 0


def test_a_recreated_offset_map_topic_is_read_from_its_start(
    spark: SparkSession, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a run recorded in Delta, then the offset-map topic lost and created again
    create_topic(clusters["source"], topic_name, 1)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    paths = StatePaths(flow.ferry.state_dir)
    for run in range(4):  # four transactions of 10 records: entries at map offsets 0..7
        produce(clusters["source"], topic_name,
                [(None, f"a{run}-{i}".encode(), 0) for i in range(10)])
        run_cycle(flow, f"run-{run}")
    # recorded as a job records its own entries: once readable
    settle_entries(flow, STABLE_WAIT_S)
    assert record_offset_map(spark_append(spark), flow, paths) == 4
    _delete(clusters["target"], offset_map_topic(flow))

    # when: the next run writes its entries into the new topic (offsets from 0 again)
    produce(clusters["source"], topic_name, [(None, f"b{i}".encode(), 0) for i in range(10)])
    assert run_cycle(flow, "after-loss") == 10

    # then: they are recorded (not taken as already recorded), and found
    settle_entries(flow, STABLE_WAIT_S)
    assert record_offset_map(spark_append(spark), flow, paths) == 1
    (incident,) = rows(paths.incidents, flow.name)
    assert (incident["kind"], incident["topic"]) == ("offset-map-recreated",
                                                     offset_map_topic(flow))
    answer = find(flow, topic_name, 0, 45)
    assert (answer.status, answer.target_offset) == ("mirrored", 45 + 4)  # 4 commit markers


@pytest.mark.parametrize(
    ("reset", "restore_first"),
    [("earliest", True), ("earliest", False), ("latest", False)],
    ids=["position-restored-then-source-recreated", "position-expired-and-source-recreated",
         "the-same-with-auto-offset-reset-latest"],
)
def test_a_recreated_source_topic_is_refused_whether_its_position_was_restored_or_expired(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, reset: str, restore_first: bool
) -> None:
    # given: 500 records of the source topic's first life mirrored, then Kafka expires the
    # flow's position (deleted here); with `restore_first`, a cycle takes it back from the
    # offset map before the topic is deleted and created again
    from ferry.core.internal import positions_group
    from ferry.steps.plan import SourceRecreatedError, prepare
    from tests.support.groups import positions
    from tests.support.kafka_data import recreate_topic

    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"old{i}".encode(), 0) for i in range(500)])
    flow = flow_config(tmp_path, clusters, topic_name,
                       f"source.consumer.auto.offset.reset = {reset}\n").enabled_flows[0]
    assert run_cycle(flow, "first-life") == 500
    remote = flow.remote_topic(topic_name)
    admin = AdminClient({"bootstrap.servers": clusters["target"]})
    admin.delete_consumer_groups([positions_group(flow)])[positions_group(flow)].result(30)
    if restore_first:
        assert run_cycle(flow, "restored") == 0
        assert positions(clusters, flow, [(remote, 0)]) == [500]
    recreate_topic(clusters["source"], topic_name)
    produce(clusters["source"], topic_name, [(None, f"new{i}".encode(), 0) for i in range(900)])

    # when / then: refused and recorded as an incident, neither planned as [500, 900) (0-499
    # of the new topic skipped) nor from 0 (appended after the old life without a word)
    with pytest.raises(SourceRecreatedError, match="deleted and created again"):
        prepare(flow, run_id="second-life")
    found = rows(StatePaths(flow.ferry.state_dir).incidents, flow.name)
    assert [(r["kind"], r["topic"], r["partition"], r["run_id"]) for r in found
            if r["kind"] == "source-recreated"] == [
        ("source-recreated", topic_name, 0, "second-life")]
    assert positions(clusters, flow, [(remote, 0)]) == [500 if restore_first else -1001]
    assert len(read_all(clusters["target"], remote, 0)) == 500


def _commit_stale(bootstrap: str, group: str, remote: str, position: int, metadata: str
                  ) -> None:
    """Commit `position` with `metadata` into `group` on `remote`-0: what the group
    coordinator still holds of a deleted topic until it drops the topic's offsets, which it
    does asynchronously after the deletion (a sync creating the topic again can come first).
    Committed after the deletion so that the coordinator never drops it: the window held
    open."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(remote, 0, position, metadata=metadata)],
                        asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("refill", ["then-records-arrive", "the-source-idle"])
def test_a_recreated_remote_topic_is_mirrored_again_from_the_start_not_from_old_positions(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, refill: str
) -> None:
    # given: 20 records mirrored (position 20), then the remote topic deleted and created
    # again while the positions group still holds position 20 of the old topic (the window
    # between the deletion and the coordinator dropping its offsets, held open); then 3 more
    # records arrive, or the source stays idle (its position is its end)
    from ferry.core.internal import positions_group
    from tests.support.groups import positions

    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(20)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    assert run_cycle(flow, "first") == 20
    remote = flow.remote_topic(topic_name)
    group = positions_group(flow)
    admin = AdminClient({"bootstrap.servers": clusters["target"]})
    (old,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(remote, 0)])])[group].result(30).topic_partitions
    assert old.offset == 20
    _delete(clusters["target"], remote)
    create_topic(clusters["target"], remote, 1)
    if refill == "then-records-arrive":
        produce(clusters["source"], topic_name,
                [(None, f"v{i}".encode(), 0) for i in range(20, 23)])
    _commit_stale(clusters["target"], group, remote, 20, old.metadata)

    # when
    copied = run_cycle(flow, "after")

    # then: the new remote topic holds every source record, once, in order; the old
    # position was an incident, not a place to resume from
    assert copied == (23 if refill == "then-records-arrive" else 20)
    source = [r.content() for r in read_all(clusters["source"], topic_name, 0)]
    assert [r.content() for r in read_all(clusters["target"], remote, 0)] == source
    assert positions(clusters, flow, [(remote, 0)]) == [len(source)]
    found = rows(StatePaths(flow.ferry.state_dir).incidents, flow.name)
    assert [(r["kind"], r["topic"], r["partition"], r["run_id"]) for r in found] == [
        ("remote-recreated", topic_name, 0, "after")]
    assert run_cycle(flow, "idle") == 0


def test_a_recreated_source_topic_whose_new_end_is_the_old_position_is_refused(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: 30 records mirrored (position 30), then the source topic deleted and created
    # again with 30 new records: its end is the old position, so the partition looks idle
    from ferry.steps.plan import SourceRecreatedError, prepare
    from tests.support.kafka_data import recreate_topic

    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"old{i}".encode(), 0) for i in range(30)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    assert run_cycle(flow, "first-life") == 30
    recreate_topic(clusters["source"], topic_name)
    produce(clusters["source"], topic_name, [(None, f"new{i}".encode(), 0) for i in range(30)])

    # when / then: refused as an incident, not an idle cycle that never copies new0..new29
    with pytest.raises(SourceRecreatedError, match="deleted and created again"):
        prepare(flow, run_id="second-life")
    found = rows(StatePaths(flow.ferry.state_dir).incidents, flow.name)
    assert [(r["kind"], r["partition"]) for r in found] == [("source-recreated", 0)]

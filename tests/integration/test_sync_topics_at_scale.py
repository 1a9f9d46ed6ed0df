"""Remote topics beyond what one KRaft request may create. A controller applies a
CreateTopics or CreatePartitions request as one batch of at most 10,000 metadata records
and refuses a bigger one ("Unable to perform excessively large batch operation"); a flow of
10,000 partitions (50 topics × 200) stopped there. The sync cuts its requests to fit, and
creates a topic too big for one request (a source topic grown over time) with what fits,
then grows it. The cutting itself: tests/unit/core/sync/test_batches.py.

The clusters are this module's own (`heavy_clusters`): a broker creating thousands of
partitions lists no newer topic until it is done, which stalled the other tests on a
shared pair for a minute."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from ferry.config import Flow
from ferry.steps.sync import sync_flow
from tests.support.kafka_data import conf, flow_config, run_cycle

pytestmark = pytest.mark.integration

BIG = 10_001
"""Partitions of the big source topic: over the limit on its own, with its topic record."""

GROWTH_S = 480
"""The longest a broker may take to show 5,001 new partitions (creating their logs): more
than 180 s with the suite held to 0.8 of the 2 cores, as long as the flow's own wait for a
new topic's leaders (`ferry.kafka.retry.seconds` below)."""


def partitions(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


def _seen_by_a_new_client(flow: Flow, topic: str) -> int:
    """The partitions of `topic` as a new client of Ferry's sees them (the sync's view)."""
    from ferry.steps.clusters import Cluster

    found = Cluster(flow.source_admin).topics().get(topic)
    return found.partitions if found is not None else 0


def test_remote_topics_over_one_requests_limit_are_created_in_steps_then_planned_whole(
    heavy_clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    clusters = heavy_clusters
    # given: a source topic grown to 10,001 partitions (as it must have been: created with
    # what one request takes, then grown), and a small one beside it
    source, target = AdminClient(conf(clusters["source"])), AdminClient(conf(clusters["target"]))
    big, small = f"{topic_name}-big", f"{topic_name}-small"
    # a broker lists no new topic while it creates the 10,001 logs of another: on a loaded
    # machine that outlasts the default two minutes Ferry waits for a new topic's leader
    flow = flow_config(tmp_path, clusters, f"{topic_name}-.*",
                       "ferry.kafka.retry.seconds = 480\nferry.writers = 1\n"
                       ).enabled_flows[0]
    remote = [flow.remote_topic(big), flow.remote_topic(small)]
    try:
        for name, count in ((big, 5_000), (small, 1)):
            source.create_topics([NewTopic(name, count, 1)])[name].result(60)
        source.create_partitions([NewPartitions(big, BIG)])[big].result(60)
        # the new partitions show in metadata a bit later, and in a new client's view (the
        # sync's) later than in this one's: a sync that saw 5,000 created the remote topic
        # with 5,000 and had nothing to grow (on a loaded machine, more than a minute late)
        deadline = time.monotonic() + GROWTH_S
        while (partitions(source, big) < BIG or _seen_by_a_new_client(flow, big) < BIG) \
                and time.monotonic() < deadline:
            time.sleep(1)  # each look reads 10,001 partitions' metadata: CPU the suite lacks
        assert _seen_by_a_new_client(flow, big) == BIG, "the source never listed the growth"

        # when: the flow's sync creates the remote topics
        report = sync_flow(flow, apply=True)

        assert report.mirrored[big] == BIG, "the sync saw fewer source partitions"
        # then: both exist with the source's partitions (before: POLICY_VIOLATION); the
        # grown partitions show in the target's metadata a bit after the sync's request
        deadline = time.monotonic() + GROWTH_S
        while partitions(target, remote[0]) < BIG and time.monotonic() < deadline:
            time.sleep(1)
        assert partitions(target, remote[0]) == BIG
        assert partitions(target, remote[1]) == 1
        assert sorted(report.mirrored) == sorted([big, small])

        # and then: the flow copies and plans all 10,002 partitions (librdkafka's reads of
        # their ends and positions in calls of at most 1,000 partitions)
        _copies_and_plans_every_partition(flow, clusters, big, small)
    finally:
        for admin, names in ((source, [big, small]), (target, remote)):
            for future in admin.delete_topics(names).values():
                future.exception(60)  # gone, or never made: either way nothing is left



def _copies_and_plans_every_partition(flow: Flow, clusters: dict[str, str], big: str,
                                      small: str) -> None:
    """The first cycle of both topics with one writer slot: one transaction starts all
    10,002 partitions (three of `big` hold a record), so it commits 10,002 positions, more
    than one write to `__consumer_offsets` takes (1 MB: about 4,500 of Ferry's positions).
    Then the next plan finds every position at its end: idle."""
    from ferry.core.internal import positions_group
    from ferry.steps.clusters import Cluster
    from ferry.steps.plan import prepare

    written = (0, 4_321, BIG - 1)  # in the first and the last of the 1,000s asked at once
    producer = Producer(conf(clusters["source"]))
    for partition in written:
        producer.produce(big, b"r", partition=partition)
    assert producer.flush(60) == 0

    assert run_cycle(flow, "first") == len(written)

    remote = [(flow.remote_topic(big), p) for p in range(BIG)] + [(flow.remote_topic(small), 0)]
    positions = Cluster(flow.target_admin).committed(positions_group(flow), remote)
    assert {k: offset for k, (offset, _) in positions.items() if offset} == {
        (flow.remote_topic(big), p): 1 for p in written}
    assert len(positions) == BIG + 1
    idle = prepare(flow, run_id="second")
    assert idle.plan.is_idle
    assert [p["low"] for p in idle.details()["partitions"]] == [None] * (BIG + 1)

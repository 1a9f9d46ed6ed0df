"""The copy lane against real brokers: exact, in order, exactly once, across gaps."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.config import Flow
from ferry.internal import offset_map_topic
from ferry.kafka.lane import Lane
from ferry.lanes import assign
from ferry.mirror import prepare
from ferry.offsetmap import decode, lookup
from tests.integration.kafka_data import (
    create_topic,
    flow_config,
    produce,
    produce_transactions,
    read_all,
    wait_lso,
)

pytestmark = pytest.mark.integration


def run_cycle(flow: Flow, run_id: str = "run") -> int:
    """One cycle in-process: prepare, then every lane in turn. Returns records copied."""
    prepared = prepare(flow, run_id=run_id)
    copied = 0
    for lane, ranges in assign(prepared.plan.ranges, prepared.lanes).items():
        copied += Lane(flow, lane, ranges, prepared.run_id).run().records
    return copied


def assert_exact(flow: Flow, clusters: dict[str, str], topic: str, partitions: int) -> None:
    """Every source record is on the target once, in order, unchanged, and the offset map
    sends each source offset to the target offset that holds that record."""
    entries = [decode(r.value) for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    for p in range(partitions):
        source = read_all(clusters["source"], topic, p)
        target = read_all(clusters["target"], flow.remote_topic(topic), p)
        assert [r.content() for r in target] == [r.content() for r in source]
        mine = sorted((e for e in entries if e.source_topic == topic and e.source_partition == p),
                      key=lambda e: e.covered_start)
        by_offset = {r.offset: r for r in target}
        for record in source:
            found = lookup(mine, record.offset)
            assert found is not None and found[1] is not None, record.offset
            assert by_offset[found[1]].content() == record.content()


def test_copies_records_with_headers_null_keys_tombstones_and_timestamps(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 3)
    records = [(None if i % 7 == 0 else f"k{i}".encode(),
                None if i % 11 == 0 else f"value-{i}".encode(), i % 3) for i in range(600)]
    produce(clusters["source"], topic_name, records)
    flow = flow_config(tmp_path, clusters, topic_name).flow("source->target")

    assert run_cycle(flow) == 600

    assert_exact(flow, clusters, topic_name, 3)
    assert run_cycle(flow, "second") == 0  # nothing new: nothing copied again


def test_second_run_copies_only_what_is_new(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(b"a", b"1", 0), (b"b", b"2", 1)])
    flow = flow_config(tmp_path, clusters, topic_name).flow("source->target")
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
    flow = flow_config(tmp_path, clusters, topic_name).flow("source->target")

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
                       ).flow("source->target")
    prepared = prepare(flow)
    assert len(prepared.plan.ranges) == 6  # 2500 per partition, in ranges of 1100
    assert run_cycle(flow) == 5000
    assert_exact(flow, clusters, topic_name, 2)

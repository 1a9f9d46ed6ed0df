"""Writer slots and lanes: a partition's writer is fixed by the flow and the partition
alone; lanes spread whole slots and follow tasks.max or the cores."""

from __future__ import annotations

import os

import pytest

from ferry.config import load_config
from ferry.core.internal import transactional_id
from ferry.core.lanes import (
    DEFAULT_LANES,
    by_writer,
    cores_of,
    lane_count,
    lanes_of,
    writer_of,
)
from ferry.core.planner import Range


@pytest.mark.parametrize(
    ("tasks_max", "cores", "partitions", "writers", "lanes"),
    [(None, 2, 8, 8, 2), (4, 2, 8, 8, 4), (4, 2, 3, 8, 3), (None, 8, 1, 8, 1),
     (None, 2, 0, 8, 2), (16, 2, 100, 8, 8), (None, 32, 100, 8, 8), (3, 2, 100, 2, 2)],
)
def test_lane_count_follows_tasks_max_or_the_cores_up_to_the_writer_slots(
    tasks_max: int | None, cores: int, partitions: int, writers: int, lanes: int
) -> None:
    assert lane_count(tasks_max, cores, partitions, writers) == lanes


def test_partitions_of_a_topic_are_balanced_over_the_writer_slots() -> None:
    counts = [0] * 4
    for p in range(16):
        counts[writer_of("orders", p, 4)] += 1
    assert counts == [4, 4, 4, 4]


def test_growth_never_moves_an_existing_partition_to_another_writer() -> None:
    before = {p: writer_of("orders", p, 8) for p in range(4)}
    after = {p: writer_of("orders", p, 8) for p in range(10)}
    assert all(after[p] == slot for p, slot in before.items())


def test_by_writer_keeps_a_partitions_ranges_in_order_in_one_slot() -> None:
    ranges = [Range("t", 0, 10, 20), Range("t", 0, 0, 10), Range("t", 1, 0, 5)]
    slots = by_writer(ranges, 8)
    assert sorted(r for rs in slots.values() for r in rs) == sorted(ranges)
    assert [r.start for r in slots[writer_of("t", 0, 8)] if r.partition == 0] == [0, 10]


@pytest.mark.parametrize(
    ("slots", "lanes", "spread"),
    [([0, 1, 2, 3, 4, 5, 6, 7], 2, [[0, 2, 4, 6], [1, 3, 5, 7]]),
     ([3, 5], 8, [[3], [5]]), ([6, 2, 2], 4, [[2, 6]]), ([], 2, [])],
)
def test_a_lane_runs_whole_writer_slots(slots: list[int], lanes: int,
                                        spread: list[list[int]]) -> None:
    assert lanes_of(slots, lanes) == spread


def test_the_writer_id_of_a_partition_is_the_same_whatever_the_lane_count_or_master(
    tmp_path: os.PathLike[str],
) -> None:
    # given: one flow configured for two lanes on Spark Connect and for eight on local[8]
    ids = set()
    for extra in ("tasks.max = 2\nferry.spark.master = sc://spark:15002\n",
                  "tasks.max = 8\nferry.spark.master = local[8]\n", ""):
        path = f"{tmp_path}/mm2-{len(ids)}-{len(extra)}.properties"
        with open(path, "w") as out:
            out.write("clusters = A, B\nA.bootstrap.servers = a:9092\n"
                      "B.bootstrap.servers = b:9092\nA->B.enabled = true\n" + extra)
        flow = load_config(path).flow("A->B")
        # then: the id of orders-5 is the same each time
        ids.add(transactional_id(flow, writer_of("orders", 5, flow.ferry.writers)))
    assert len(ids) == 1
    (only,) = ids
    assert only.startswith("ferry.A->B.writer-") and only.endswith("-of-8")


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local[3]", 3), ("local[4,2]", 4), ("local[*]", os.cpu_count()), ("local", os.cpu_count()),
     ("spark://m:7077", DEFAULT_LANES), ("yarn", DEFAULT_LANES)],
)
def test_cores_of_a_spark_master(master: str, cores: int) -> None:
    assert cores_of(master) == cores

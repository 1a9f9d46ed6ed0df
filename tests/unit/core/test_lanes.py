"""Lane assignment: stable, balanced within a topic, bounded by tasks.max."""

from __future__ import annotations

import os

import pytest

from ferry.core.lanes import DEFAULT_LANES, assign, cores_of, lane_count, lane_of
from ferry.core.planner import Range


@pytest.mark.parametrize(
    ("tasks_max", "cores", "partitions", "lanes"),
    [(None, 2, 8, 2), (4, 2, 8, 4), (4, 2, 3, 3), (None, 8, 1, 1), (None, 2, 0, 2)],
)
def test_lane_count(tasks_max: int | None, cores: int, partitions: int, lanes: int) -> None:
    assert lane_count(tasks_max, cores, partitions) == lanes


def test_partitions_of_a_topic_are_balanced() -> None:
    counts = [0, 0]
    for p in range(8):
        counts[lane_of("orders", p, 2)] += 1
    assert counts == [4, 4]


def test_growth_never_moves_an_existing_partition() -> None:
    before = {p: lane_of("orders", p, 3) for p in range(4)}
    after = {p: lane_of("orders", p, 3) for p in range(10)}
    assert all(after[p] == lane for p, lane in before.items())


def test_assign_keeps_a_partitions_ranges_in_order_on_one_lane() -> None:
    ranges = [Range("t", 0, 10, 20), Range("t", 0, 0, 10), Range("t", 1, 0, 5)]
    lanes = assign(ranges, 2)
    assert sorted(r for rs in lanes.values() for r in rs) == sorted(ranges)
    lane0 = lanes[lane_of("t", 0, 2)]
    assert [r.start for r in lane0 if r.partition == 0] == [0, 10]


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local[3]", 3), ("local[4,2]", 4), ("local[*]", os.cpu_count()), ("local", os.cpu_count()),
     ("spark://m:7077", DEFAULT_LANES), ("yarn", DEFAULT_LANES)],
)
def test_cores_of_a_spark_master(master: str, cores: int) -> None:
    assert cores_of(master) == cores

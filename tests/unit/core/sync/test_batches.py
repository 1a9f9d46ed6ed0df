"""Topic creations and growth cut to what one KRaft request may apply (10,000 metadata
records: a topic, its partitions, its configs). On real brokers:
tests/integration/test_sync_topics_at_scale.py."""

from __future__ import annotations

import pytest

from ferry.core.sync.batches import create_batches, first_step, growth_steps


@pytest.mark.parametrize(("topics", "batches"), [
    ([], []),
    ([("a", 200, 3)], [["a"]]),
    # 50 topics of 200 partitions: 10,050 records with their topic records, in two
    ([(f"t{i}", 200, 0) for i in range(50)],
     [[f"t{i}" for i in range(49)], ["t49"]]),
    # exactly at the limit: one request
    ([("a", 4_999, 0), ("b", 4_999, 0)], [["a", "b"]]),
    # one record over: two
    ([("a", 4_999, 1), ("b", 4_999, 0)], [["a"], ["b"]]),
    # a topic over the limit goes alone; the others keep their order
    ([("small", 10, 0), ("big", 12_000, 2), ("tiny", 1, 0)],
     [["small"], ["big"], ["tiny"]]),
])
def test_creations_go_in_requests_of_at_most_ten_thousand_records(
    topics: list[tuple[str, int, int]], batches: list[list[str]]
) -> None:
    assert create_batches(topics) == batches


@pytest.mark.parametrize(("partitions", "configs", "first"), [
    (200, 3, 200),
    (9_999, 0, 9_999),
    (10_000, 0, 9_999),
    (12_000, 4, 9_995),
])
def test_a_topic_too_big_for_one_request_is_created_with_what_fits(
    partitions: int, configs: int, first: int
) -> None:
    assert first_step(partitions, configs) == first


@pytest.mark.parametrize(("current", "wanted", "steps"), [
    (10, 10, []),
    (10, 20, [20]),
    (9_999, 25_000, [19_999, 25_000]),
    (1, 10_001, [10_001]),
])
def test_partitions_are_added_ten_thousand_at_a_time(current: int, wanted: int,
                                                     steps: list[int]) -> None:
    assert growth_steps(current, wanted) == steps

"""`ferry positions reset`: where a flow continues copying a topic, set on every partition
of its remote topic, within what the source holds."""

from __future__ import annotations

import pytest

from ferry.config import MirrorConfig
from ferry.errors import TerminalError, UsageError
from ferry.steps.positions import Reset, reset
from tests.unit.steps.fakes import FakeCluster

GROUP = "__ferry-positions.A"


def clusters() -> tuple[FakeCluster, FakeCluster]:
    """orders on A holds offsets 10..49 in each of its two partitions; the flow is at 40 on
    partition 0 of A.orders and has no position on partition 1."""
    source = FakeCluster("A").topic("orders", 50, 50, start=10)
    target = FakeCluster("B", groups={GROUP: {("A.orders", 0): (40, "")}})
    return source, target


@pytest.mark.parametrize(
    ("to", "after"),
    [("earliest", 10), ("latest", 50), ("25", 25), ("10", 10), ("50", 50)],
    ids=["earliest-is-the-log-start", "latest-is-the-last-stable-offset", "an-offset-within",
         "the-log-start-itself", "the-end-itself"],
)
def test_a_reset_moves_every_partition_of_the_remote_topic_to_the_chosen_position(
    config: MirrorConfig, to: str, after: int
) -> None:
    # given
    source, target = clusters()
    # when
    resets = reset(config.flow("A->B"), "orders", to, source=source, target=target)
    # then
    assert resets == [Reset("orders", 0, 40, after), Reset("orders", 1, None, after)]
    assert target.group_offsets(GROUP, [("A.orders", 0), ("A.orders", 1)]) == {
        ("A.orders", 0): after, ("A.orders", 1): after}


@pytest.mark.parametrize("to", ["9", "51", "-1"],
                         ids=["below-the-log-start", "past-the-end", "negative"])
def test_an_offset_outside_what_the_source_holds_is_refused_and_nothing_changes(
    config: MirrorConfig, to: str
) -> None:
    source, target = clusters()

    with pytest.raises(TerminalError, match=r"orders-0 holds offsets 10\.\.49"):
        reset(config.flow("A->B"), "orders", to, source=source, target=target)

    assert target.altered == []


def test_a_dry_run_reports_the_reset_and_changes_nothing(config: MirrorConfig) -> None:
    source, target = clusters()

    resets = reset(config.flow("A->B"), "orders", "earliest", dry_run=True, source=source,
                   target=target)

    assert [(r.partition, r.before, r.after) for r in resets] == [(0, 40, 10), (1, None, 10)]
    assert target.altered == []
    assert target.group_offsets(GROUP, [("A.orders", 0)]) == {("A.orders", 0): 40}


def test_positions_are_committed_in_one_call_into_the_flows_positions_group_without_metadata(
    config: MirrorConfig
) -> None:
    source, target = clusters()

    reset(config.flow("A->B"), "orders", "latest", source=source, target=target)

    assert target.altered == [(GROUP, [("A.orders", 0, 50, ""), ("A.orders", 1, 50, "")])]


@pytest.mark.parametrize("to", ["next", "1.5", ""], ids=["a-word", "a-fraction", "nothing"])
def test_a_position_that_is_not_earliest_latest_or_an_offset_is_a_usage_error(
    config: MirrorConfig, to: str
) -> None:
    source, target = clusters()

    with pytest.raises(UsageError, match="give earliest, latest or an offset"):
        reset(config.flow("A->B"), "orders", to, source=source, target=target)

    assert target.altered == []


@pytest.mark.parametrize("topic", ["missing", "__consumer_offsets"],
                         ids=["not-on-the-source", "excluded-by-the-topic-filter"])
def test_a_topic_the_flow_does_not_mirror_is_a_usage_error_naming_those_it_does(
    config: MirrorConfig, topic: str
) -> None:
    source, target = clusters()
    source.topic("__consumer_offsets", 5)

    with pytest.raises(UsageError, match=rf"does not mirror a source topic '{topic}' \(it "
                                         r"mirrors: orders\)"):
        reset(config.flow("A->B"), topic, "earliest", source=source, target=target)

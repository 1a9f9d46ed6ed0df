"""`ferry positions reset`: where a flow continues copying a topic, set on every partition
of its remote topic, within what the source holds."""

from __future__ import annotations

import pytest

from ferry.config import Config
from ferry.errors import TerminalError, UsageError
from ferry.steps.positions import Reset, reset
from tests.unit.steps.fakes import FakeCluster

GROUP = "__ferry-positions.A"


def clusters() -> tuple[FakeCluster, FakeCluster]:
    """orders on A holds offsets 10..49 in each of its two partitions; the flow is at 40 on
    partition 0 of A.orders and has no position on partition 1."""
    source = FakeCluster("A", ids={"orders": "s1"}).topic("orders", 50, 50, start=10)
    target = FakeCluster("B", groups={GROUP: {("A.orders", 0): (40, "")}}) \
        .topic("A.orders", 30, 0)
    return source, target


@pytest.mark.parametrize(
    ("to", "after"),
    [("earliest", 10), ("latest", 50), ("25", 25), ("10", 10), ("50", 50)],
    ids=["earliest-is-the-log-start", "latest-is-the-last-stable-offset", "an-offset-within",
         "the-log-start-itself", "the-end-itself"],
)
def test_a_reset_moves_every_partition_of_the_remote_topic_to_the_chosen_position(
    config: Config, to: str, after: int
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
    config: Config, to: str
) -> None:
    source, target = clusters()

    with pytest.raises(TerminalError, match=r"orders-0 holds offsets 10\.\.49"):
        reset(config.flow("A->B"), "orders", to, source=source, target=target)

    assert target.altered == []


def test_a_dry_run_reports_the_reset_and_changes_nothing(config: Config) -> None:
    source, target = clusters()

    resets = reset(config.flow("A->B"), "orders", "earliest", dry_run=True, source=source,
                   target=target)

    assert [(r.partition, r.before, r.after) for r in resets] == [(0, 40, 10), (1, None, 10)]
    assert target.altered == []
    assert target.group_offsets(GROUP, [("A.orders", 0)]) == {("A.orders", 0): 40}


def test_each_position_is_written_as_a_run_writes_it_with_an_offset_map_entry_of_the_reset(
    config: Config
) -> None:
    from ferry.core.offsetmap import RESET_LANE
    from ferry.core.positions import decode_position
    from ferry.steps.recovery import latest_positions

    source, target = clusters()
    flow = config.flow("A->B")

    reset(flow, "orders", "latest", source=source, target=target)

    # under the partition's writer id, expecting the position read before, with the source
    # topic's ID and the remote partition's end
    assert [(w.partition, w.position, w.expect, w.source_id, w.target_end)
            for w in target.positions_written] == [(0, 50, 40, "s1", 30), (1, 50, None, "s1", 0)]
    assert decode_position(target.groups[GROUP][("A.orders", 1)][1]).source_id == "s1"
    # and the offset map says so: a position restored from it later is the reset one
    entries = [e for _, e in target.map_topic]
    assert [(e.lane, e.source_partition, e.covered_start, e.covered_end, e.records)
            for e in entries] == [(RESET_LANE, 0, 50, 50, 0), (RESET_LANE, 1, 50, 50, 0)]
    assert {tp.partition: r.position
            for tp, r in latest_positions(flow, target.map_topic).items()} == {0: 50, 1: 50}
    assert target.altered == []


def test_a_position_a_run_moves_each_time_it_is_read_is_left_and_the_reset_fails_naming_it(
    config: Config
) -> None:
    # given: a run commits partition 0 five further between each read of the reset and
    # its write
    source, target = clusters()
    read = target.group_offsets

    def read_then_a_run_commits(group: str, tps: object) -> object:
        found = read(group, tps)  # type: ignore[arg-type]
        position, meta = target.groups[GROUP][("A.orders", 0)]
        target.groups[GROUP][("A.orders", 0)] = (position + 5, meta)
        return found

    target.group_offsets = read_then_a_run_commits  # type: ignore[method-assign]

    # when / then: read and written again twice more, then left as the run committed it
    with pytest.raises(TerminalError, match=r"A\.orders-0 \(50 -> 55\) moved while resetting"):
        reset(config.flow("A->B"), "orders", "earliest", source=source, target=target)
    assert target.groups[GROUP][("A.orders", 0)] == (55, "")
    assert [w.partition for w in target.positions_written] == [1]


def test_a_position_a_run_moved_once_meanwhile_is_read_and_reset_again(config: Config) -> None:
    # given: a run commits partition 0 at 45 between the reset's first read and its write
    # (the writes then named the flow's newest: the run yields to them)
    source, target = clusters()
    read = target.group_offsets
    reads: list[object] = []

    def read_then_a_run_commits_once(group: str, tps: object) -> object:
        found = read(group, tps)  # type: ignore[arg-type]
        if not reads:
            target.groups[GROUP][("A.orders", 0)] = (45, "")
        reads.append(tps)
        return found

    target.group_offsets = read_then_a_run_commits_once  # type: ignore[method-assign]

    # when
    resets = reset(config.flow("A->B"), "orders", "earliest", source=source, target=target)

    # then: partition 0 was read again and reset from where the run left it
    (first, *_) = resets
    assert (first.partition, first.before) == (0, 45)
    assert target.groups[GROUP][("A.orders", 0)][0] == first.after
    assert sorted(w.partition for w in target.positions_written) == [0, 1]


@pytest.mark.parametrize("to", ["next", "1.5", ""], ids=["a-word", "a-fraction", "nothing"])
def test_a_position_that_is_not_earliest_latest_or_an_offset_is_a_usage_error(
    config: Config, to: str
) -> None:
    source, target = clusters()

    with pytest.raises(UsageError, match="give earliest, latest or an offset"):
        reset(config.flow("A->B"), "orders", to, source=source, target=target)

    assert target.altered == []


@pytest.mark.parametrize("topic", ["missing", "__consumer_offsets"],
                         ids=["not-on-the-source", "excluded-by-the-topic-filter"])
def test_a_topic_the_flow_does_not_mirror_is_a_usage_error_naming_those_it_does(
    config: Config, topic: str
) -> None:
    source, target = clusters()
    source.topic("__consumer_offsets", 5)

    with pytest.raises(UsageError, match=rf"does not mirror a source topic '{topic}' \(it "
                                         r"mirrors: orders\)"):
        reset(config.flow("A->B"), topic, "earliest", source=source, target=target)

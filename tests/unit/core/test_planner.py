"""The planner as a table: new, empty, caught-up, behind retention, ahead, split."""

from __future__ import annotations

import pytest

from ferry.core.planner import (
    Gap,
    Limits,
    PositionAheadError,
    Range,
    TopicPartition,
    Watermarks,
    plan,
)
from ferry.errors import TerminalError

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.mark.parametrize(
    ("position", "marks", "limits", "ranges", "gaps"),
    [
        (None, (0, 10), Limits(), [(0, 10, None)], []),
        (None, (5, 10), Limits(), [(5, 10, None)], []),
        (None, (0, 10), Limits(reset="latest"), [(10, 10, None)], []),
        (None, (0, 0), Limits(), [(0, 0, None)], []),
        (3, (0, 10), Limits(), [(3, 10, 3)], []),
        (10, (0, 10), Limits(), [], []),
        (0, (0, 0), Limits(), [], []),
        (2, (5, 10), Limits(), [], [(2, 5)]),
        (2, (5, 10), Limits(on_gap="continue"), [(5, 10, 2, 2)], [(2, 5)]),
        (2, (5, 5), Limits(on_gap="continue"), [(5, 5, 2, 2)], [(2, 5)]),
        (2, (5, 25), Limits(on_gap="continue", max_records=10),
         [(5, 15, 2, 2), (15, 25, 15)], [(2, 5)]),
        (0, (0, 25), Limits(max_records=10), [(0, 10, 0), (10, 20, 10), (20, 25, 20)], []),
        (None, (0, 20), Limits(max_records=10), [(0, 10, None), (10, 20, 10)], []),
    ],
    ids=["new-from-zero", "new-after-retention", "new-latest-marks-the-end",
         "new-empty-marks-start", "behind", "caught-up", "empty-caught-up", "gap-fails",
         "gap-continues", "gap-then-nothing", "gap-then-split", "split-backlog", "split-new"],
)
def test_plan_one_partition(
    position: int | None, marks: tuple[int, int], limits: Limits,
    ranges: list[tuple[int, ...]], gaps: list[tuple[int, int]],
) -> None:
    positions = {} if position is None else {T0: position}
    result = plan(positions, {T0: Watermarks(*marks)}, limits)
    # (start, end, expected position[, skip_from]): each range expects the position it was
    # planned from; the first range of a partition never mirrored expects none
    assert result.ranges == tuple(Range("t", 0, r[0], r[1], r[3] if len(r) > 3 else None,
                                        expect=r[2]) for r in ranges)
    assert result.gaps == tuple(Gap("t", 0, s, e) for s, e in gaps)


def test_position_past_the_end_is_an_error_naming_topic_and_remedy() -> None:
    with pytest.raises(PositionAheadError) as err:
        plan({T0: 50}, {T0: Watermarks(0, 7)})
    assert "t-0 ends at offset 7 but offsets up to 50 were already mirrored" in str(err.value)
    assert "recreated" in str(err.value) and "reset" in str(err.value)


def test_several_partitions_ahead_are_all_named() -> None:
    with pytest.raises(TerminalError, match=r"2 source partitions \(t-0, t-1\)"):
        plan({T0: 50, T1: 9}, {T0: Watermarks(0, 7), T1: Watermarks(0, 3)})


def test_partitions_are_planned_independently_and_in_order() -> None:
    result = plan({T1: 4}, {T1: Watermarks(0, 6), T0: Watermarks(0, 2)})
    assert result.ranges == (Range("t", 0, 0, 2), Range("t", 1, 4, 6, expect=4))
    assert result.span == 4 and len(result.copies) == 2


def test_idle_plan_has_nothing_to_copy_or_record() -> None:
    assert plan({T0: 5}, {T0: Watermarks(0, 5)}).is_idle
    assert not plan({}, {T0: Watermarks(0, 0)}).is_idle  # the start must be recorded
    assert plan({}, {T0: Watermarks(0, 0)}).copies == ()

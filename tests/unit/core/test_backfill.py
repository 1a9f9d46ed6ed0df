"""Backfill planning: bounds, destinations, gaps, overlaps, order, chunks (pure)."""

from __future__ import annotations

import pytest

from ferry.core.backfill import (
    Bound,
    Held,
    PartitionWindow,
    check_destinations,
    destination_of,
    parse_bound,
    plan_backfill,
)
from ferry.core.planner import Gap, Range, TopicPartition
from ferry.errors import UsageError

TP = TopicPartition("orders", 0)


@pytest.mark.parametrize(("text", "start", "expected"), [
    ("earliest", True, Bound("earliest")),
    ("latest", False, Bound("latest")),
    (" 1200 ", True, Bound("offset", 1200)),
    ("2026-11-26T08:00:00Z", True, Bound("time", 1_795_680_000_000)),
    ("2026-11-26T08:00:00", False, Bound("time", 1_795_680_000_000)),  # no zone: UTC
    ("2026-11-26T09:00:00+01:00", True, Bound("time", 1_795_680_000_000)),
])
def test_a_bound_is_a_word_an_offset_or_a_time(text: str, start: bool, expected: Bound) -> None:
    assert parse_bound(text, "from", start=start) == expected


@pytest.mark.parametrize(("text", "start"), [
    ("latest", True), ("earliest", False), ("-5", True), ("yesterday", False), ("", True)])
def test_a_bad_bound_is_one_line_naming_the_param(text: str, start: bool) -> None:
    with pytest.raises(UsageError) as err:
        parse_bound(text, "from" if start else "to", start=start)
    assert str(err.value).startswith(("from=", "to=")) and "\n" not in str(err.value)


@pytest.mark.parametrize(("template", "destination"), [
    ("", "A.orders"), ("investigation.orders", "investigation.orders"),
    ("inv.{topic}.window", "inv.orders.window")])
def test_the_destination_is_the_remote_topic_or_the_named_one(template: str,
                                                              destination: str) -> None:
    assert destination_of(template, "orders", "A.orders") == destination


def test_several_topics_into_one_named_topic_are_refused() -> None:
    with pytest.raises(UsageError, match=r"\{topic\}"):
        check_destinations("investigation", ["orders", "payments"])
    check_destinations("investigation.{topic}", ["orders", "payments"])
    check_destinations("investigation", ["orders"])


def window(start: int, end: int, *, low: int = 0, high: int = 1000, position: int | None = None,
           remote: bool = True, held: tuple[Held, ...] = ()) -> PartitionWindow:
    return PartitionWindow(TP, "A.orders" if remote else "inv.orders", remote, low, high, start,
                           end, position, held)


def test_a_fresh_remote_topic_is_filled_in_chunks_of_every_partition() -> None:
    other = TopicPartition("orders", 1)
    windows = [window(100, 350, low=100),
               PartitionWindow(other, "A.orders", True, 0, 120, 0, 120, None)]
    plan = plan_backfill(windows, chunk_records=100)
    # the first chunk expects the fresh topic's lack of a position, each later chunk the
    # position the chunk before it commits
    assert plan.chunks == (
        (Range("orders", 0, 100, 200, None, "A.orders"), Range("orders", 1, 0, 100, None,
                                                                "A.orders")),
        (Range("orders", 0, 200, 300, None, "A.orders", expect=200, chained=True),
         Range("orders", 1, 100, 120, None, "A.orders", expect=100, chained=True)),
        (Range("orders", 0, 300, 350, None, "A.orders", expect=300, chained=True),),
    )
    assert plan.span == 250 + 120 and not plan.gaps and not plan.refusals
    assert plan.windows == {TP: (100, 350), other: (0, 120)}


@pytest.mark.parametrize(("case", "w", "words"), [
    ("the flow already mirrored part of it",
     window(0, 500, position=300), ["offsets 0..299 are already there", "from=300"]),
    ("all of it is already there",
     window(100, 200, position=300), ["offsets 100..199 are already there"]),
    ("an entry the destination holds overlaps",
     window(50, 500, remote=False, held=(Held(0, 100, "run-1"),)),
     ["offsets 50..99 are already there (run run-1)", "from=100"]),
    ("the destination holds later offsets",
     window(0, 100, remote=False, held=(Held(400, 500, "run-2"),)),
     ["later offsets (from 400)", "out of order"]),
    ("the remote topic would skip what the flow has not mirrored",
     window(600, 800, position=300), ["leave offsets 300..599 unmirrored", "from=300"]),
    ("a partition the flow never mirrored would start past its log start",
     window(600, 800, low=50), ["has not mirrored it yet", "leave offsets 50..599 unmirrored",
                                "from=50"]),
    ("the window ends past the source's end",
     window(0, 2000), ["to=2000 is past the source's end 1000"]),
])
def test_a_refused_window_names_the_offsets_and_how_to_proceed(
        case: str, w: PartitionWindow, words: list[str]) -> None:
    plan = plan_backfill([w], chunk_records=100)
    assert plan.chunks == ()
    (refusal,) = plan.refusals
    text = refusal.text()
    assert all(word in text for word in words), (case, text)
    assert "nothing was written" in str(plan.refused())


def test_the_remote_topic_continues_exactly_where_the_flow_stands() -> None:
    plan = plan_backfill([window(300, 450, position=300)], chunk_records=1000)
    assert plan.chunks == ((Range("orders", 0, 300, 450, None, "A.orders", expect=300),),)


def test_a_named_topic_may_take_a_later_window_after_an_earlier_one() -> None:
    plan = plan_backfill([window(600, 700, position=200, remote=False,
                                 held=(Held(100, 200, "run-1"),))], chunk_records=1000)
    # the position moves from 200 to 700 with the first chunk's records
    assert plan.chunks == ((Range("orders", 0, 600, 700, 200, "inv.orders", expect=200),),)


def test_a_window_before_the_log_start_is_a_gap_that_fails_unless_continued() -> None:
    lost = window(0, 500, low=200)
    failed = plan_backfill([lost], chunk_records=1000)
    assert failed.gaps == (Gap("orders", 0, 0, 200),) and failed.chunks == ()
    continued = plan_backfill([lost], chunk_records=1000, on_gap="continue")
    assert continued.gaps == (Gap("orders", 0, 0, 200),)
    assert continued.chunks == ((Range("orders", 0, 200, 500, None, "A.orders"),),)


def test_a_flow_position_inside_a_gap_is_covered_by_the_first_range() -> None:
    plan = plan_backfill([window(150, 500, low=200, position=150)], chunk_records=1000,
                         on_gap="continue")
    assert plan.gaps == (Gap("orders", 0, 150, 200),)
    assert plan.chunks == ((Range("orders", 0, 200, 500, 150, "A.orders", expect=150),),)


@pytest.mark.parametrize(("start", "end"), [(300, 300), (500, 400)])
def test_an_empty_window_copies_nothing(start: int, end: int) -> None:
    plan = plan_backfill([window(start, end)], chunk_records=10)
    assert plan.chunks == () and plan.empty == (TP,) and not plan.refusals


def test_chunk_records_must_be_positive() -> None:
    with pytest.raises(UsageError, match="chunk records=0"):
        plan_backfill([window(0, 10)], chunk_records=0)

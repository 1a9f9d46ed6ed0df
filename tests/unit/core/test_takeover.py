"""Two runs of one flow at once: the newest goes on, an older one yields, and a slot taken
from the newest in the moment it started is taken back once."""

from __future__ import annotations

import json

import pytest

from ferry.core.planner import Range
from ferry.core.tables import RangeOutcome, RangeResult
from ferry.core.takeover import (
    decode_marker,
    encode_marker,
    left_over,
    merged,
    newer_run,
    take_back,
    yielded,
)

COPIED, FAILED, SKIPPED, PENDING = (RangeOutcome.COPIED, RangeOutcome.FAILED,
                                    RangeOutcome.SKIPPED, RangeOutcome.PENDING)


def test_a_marker_names_the_run_it_was_written_for() -> None:
    assert decode_marker(encode_marker("cycle-7", 1_700_000_000_000)) == "cycle-7"


@pytest.mark.parametrize("metadata", [
    None, "", "not json", "[]", json.dumps({"ferry_run": "x"}),
    json.dumps({"ferry_format": 2, "ferry_run": "x"}),
    json.dumps({"ferry_format": 1, "ferry_run": ""}),
    json.dumps({"ferry_format": 1, "ferry_run": 7})])
def test_metadata_that_is_not_a_marker_names_no_run(metadata: str | None) -> None:
    assert decode_marker(metadata) is None


@pytest.mark.parametrize(("newest", "run", "newer", "takes_back"), [
    ("b", "a", "b", False),    # another run is newer: yield, never take back
    ("a", "a", None, True),    # this run is the newest: go on, take a slot back
    (None, "a", None, False),  # unknown: go on, but start no tug of war
])
def test_the_newest_run_goes_on_and_only_it_takes_a_slot_back(
    newest: str | None, run: str, newer: str | None, takes_back: bool
) -> None:
    assert newer_run(newest, run) == newer
    assert take_back(newest, run) is takes_back


def r(start: int, end: int, partition: int = 0) -> Range:
    return Range("t", partition, start, end)


def res(start: int, end: int, outcome: RangeOutcome, records: int = 0,
        partition: int = 0) -> RangeResult:
    return RangeResult("t", partition, start, end, records=records, bytes=records * 10,
                       outcome=outcome)


@pytest.mark.parametrize(("outcomes", "left"), [
    ((COPIED, FAILED, PENDING), [r(10, 20), r(20, 30)]),
    ((SKIPPED, COPIED, FAILED), [r(20, 30)]),
    ((COPIED, COPIED, COPIED), []),
    ((FAILED, PENDING, PENDING), [r(0, 10), r(10, 20), r(20, 30)]),
])
def test_a_slot_taken_back_runs_again_the_ranges_its_first_writer_did_not_finish(
    outcomes: tuple[RangeOutcome, ...], left: list[Range]
) -> None:
    ranges = [r(0, 10), r(10, 20), r(20, 30)]
    results = [res(x.start, x.end, o) for x, o in zip(ranges, outcomes, strict=True)]
    assert left_over(ranges, list(reversed(results))) == left


def test_a_range_run_twice_counts_what_both_writers_copied_and_ends_as_the_second() -> None:
    first = [res(0, 10, COPIED, 10), res(10, 20, FAILED, 4), res(20, 30, FAILED, 0)]
    first[1].error = "taken"
    again = [res(10, 20, COPIED, 6), res(20, 30, COPIED, 10)]
    out = merged(first, again)
    assert [(x.start, x.outcome, x.records, x.bytes, x.error) for x in out] == [
        (0, COPIED, 10, 100, ""), (10, COPIED, 10, 100, ""), (20, COPIED, 10, 100, "")]


def test_a_run_that_yielded_says_which_run_took_over_in_one_line() -> None:
    line = yielded("src->tgt", "cycle-8")
    assert "run cycle-8" in line and "src->tgt" in line and "\n" not in line
    assert "nothing is doubled" in line

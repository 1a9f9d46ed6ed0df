"""Two runs of one flow at once: the newest goes on, an older one yields, and a slot taken
from the newest in the moment it started is taken back once; of two continuous runs, the
earlier hands over to the later."""

from __future__ import annotations

import json

import pytest

from ferry.core.planner import Range
from ferry.core.tables import RangeOutcome, RangeResult
from ferry.core.takeover import (
    Named,
    cycle_named,
    decode_marker,
    encode_marker,
    hands_over,
    left_over,
    merged,
    names_itself,
    newer_run,
    take_back,
    yielded,
)

COPIED, FAILED, SKIPPED, PENDING = (RangeOutcome.COPIED, RangeOutcome.FAILED,
                                    RangeOutcome.SKIPPED, RangeOutcome.PENDING)


@pytest.mark.parametrize("named", [Named("cycle-7"), Named("scheduled__2026-12-01", 1_700),
                                   Named("scheduled__2026-12-01", 1_700, "cycle-8"),
                                   Named("positions-1", positions=True),
                                   Named("positions-1", positions=True, done=True)])
def test_a_marker_names_the_run_it_was_written_for_with_a_continuous_runs_place(
    named: Named
) -> None:
    assert decode_marker(encode_marker(named, 1_700_000_000_000)) == named


def test_a_marker_of_an_earlier_ferry_names_a_run_of_one_cycle() -> None:
    earlier = json.dumps({"ferry_format": 1, "ferry_run": "cycle-7", "ferry_at": 5})
    assert decode_marker(earlier) == Named("cycle-7")


@pytest.mark.parametrize("metadata", [
    None, "", "not json", "[]", json.dumps({"ferry_run": "x"}),
    json.dumps({"ferry_format": 2, "ferry_run": "x"}),
    json.dumps({"ferry_format": 1, "ferry_run": ""}),
    json.dumps({"ferry_format": 1, "ferry_run": 7})])
def test_metadata_that_is_not_a_marker_names_no_run(metadata: str | None) -> None:
    assert decode_marker(metadata) is None


A, B = Named("a"), Named("b")  # runs of one cycle
WRITING = Named("positions-1", positions=True)  # a reset under way
WRITTEN = Named("positions-1", positions=True, done=True)  # and done
HUNG, LIVE = Named("run-1", 1_000, "cycle-1"), Named("run-1", 1_000, "cycle-2")  # its cycles
EARLY, LATE = Named("run-1", 1_000), Named("run-2", 2_000)  # continuous runs, in order
RETRY = Named("run-1", 1_000)  # the same DAG run's next try


@pytest.mark.parametrize(("newest", "me", "newer", "takes_back", "hands_over_to", "names"), [
    (B, A, "b", False, None, True),       # another run named after: yield, never take back
    (A, A, None, True, None, True),       # this run is the newest: go on, take a slot back
    (None, A, None, False, None, True),   # unknown: go on, but start no tug of war
    (LATE, EARLY, "run-2", False, "run-2", False),  # a later continuous run: hand over
    (EARLY, LATE, None, True, None, True),  # an earlier one named again: go on, name itself
    (RETRY, EARLY, None, True, None, True),  # a try of the same run: it is this run
    (B, EARLY, "b", False, None, True),   # a run of one cycle: yield to it, never hand over
    (EARLY, A, "run-1", False, None, True),  # one cycle named before a continuous run
    (None, EARLY, None, False, None, True),
    (LIVE, HUNG, "cycle-2", False, None, True),  # an abandoned cycle yields to the next
    (LIVE, LIVE, None, True, None, True),  # the live cycle takes a slot back
    (HUNG, LIVE, "cycle-1", False, None, True),  # of one run's cycles, the last named goes on
    (EARLY, HUNG, None, True, None, True),  # its run named as a whole: it is this run
    (HUNG, LATE, None, True, None, True),  # a cycle of an earlier run: go on
    (LIVE, EARLY, None, True, None, True),  # a cycle of this run, named by its loop
    (WRITING, EARLY, "positions-1", False, None, False),  # a reset under way: left to it
    (WRITING, LIVE, "positions-1", False, None, False),
    (WRITING, A, "positions-1", False, None, False),
    (WRITTEN, LIVE, "positions-1", False, None, True),  # done: named again, planned anew
    (WRITTEN, A, "positions-1", False, None, True),
])
def test_the_newest_run_goes_on_and_an_earlier_continuous_run_hands_over_to_a_later_one(
    newest: Named | None, me: Named, newer: str | None, takes_back: bool,
    hands_over_to: str | None, names: bool
) -> None:
    assert newer_run(newest, me) == newer
    assert take_back(newest, me) is takes_back
    assert hands_over(newest, me) == hands_over_to
    assert names_itself(newest, me) is names


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


def test_a_positions_write_whose_writer_is_gone_counts_as_done_after_its_lease() -> None:
    from ferry.core.takeover import POSITIONS_LEASE_MS, writing

    marker = encode_marker(WRITING, 1_000)
    assert writing(decode_marker(marker, now_ms=1_000 + POSITIONS_LEASE_MS - 1))
    assert not writing(decode_marker(marker, now_ms=1_000 + POSITIONS_LEASE_MS))
    assert not writing(decode_marker(encode_marker(WRITTEN, 1_000), now_ms=1_000))


@pytest.mark.parametrize(("owner", "expected"), [
    (None, Named("cycle-3")),
    (Named("manual__1"), Named("manual__1")),
    (Named("scheduled__1", 1_700), Named("scheduled__1", 1_700, "cycle-3")),
], ids=["a-run-of-one-cycle", "a-named-run-of-one-cycle", "a-continuous-runs-cycle"])
def test_a_cycle_names_itself_and_its_writers_with_its_continuous_run_and_itself(
    owner: Named | None, expected: Named
) -> None:
    # the Spark tasks' writers and the kept lanes name a cycle alike, so that a cycle the
    # loop abandoned yields to the run's later cycles on either path
    assert cycle_named(owner, "cycle-3") == expected

"""Folding adjacent offset-map entries of one run (ferry.core.coalescing): which fold, and
that a folded map answers every look-up as the entries did."""

from __future__ import annotations

import pytest

from ferry.core.coalescing import StoredEntry, coalesce, foldable, join
from ferry.core.offsetmap import MapEntry, Segment, covering, latest_cover
from ferry.core.tables import held_keys

SETTLED = 10_000
"""Entries committed before this (epoch ms) are settled in these tests."""


def entry(start: int, end: int, target: int, *, run: str = "r1", lane: int = 0,
          at: int = 1_000, partition: int = 0, target_id: str = "T") -> MapEntry:
    """An entry covering [start, end) whose records went to target offsets from `target`
    (one transaction: one segment, its commit marker after it)."""
    return MapEntry("a->b", run, lane, "t", partition, "a.t", partition, start, end,
                    (Segment(start, target, end - start),) if end > start else (),
                    at, bytes=10 * (end - start), target_end=target + end - start,
                    source_id="S", target_id=target_id)


def stored(offset: int, e: MapEntry, last: int | None = None, topic_id: str = "M"
           ) -> StoredEntry:
    return StoredEntry(topic_id, offset, offset if last is None else last, e)


def transactions(count: int, size: int = 5, **kw: object) -> list[StoredEntry]:
    """`count` transactions of `size` records in a row, each followed by its marker."""
    return [stored(i, entry(i * size, (i + 1) * size, i * (size + 1), **kw))  # type: ignore[arg-type]
            for i in range(count)]


def test_a_runs_adjacent_settled_entries_fold_into_one_row_that_keeps_their_facts() -> None:
    rows = transactions(4)
    (one,) = coalesce(rows, SETTLED)
    assert (one.first, one.last, one.folded) == (0, 3, 4)
    assert (one.entry.covered_start, one.entry.covered_end) == (0, 20)
    assert one.entry.records == 20 and one.entry.bytes == 200
    assert one.entry.segments == tuple(r.entry.segments[0] for r in rows)  # markers between
    assert one.entry.target_end == rows[-1].entry.target_end
    assert one.entry.committed_at_ms == rows[-1].entry.committed_at_ms


@pytest.mark.parametrize(("second", "why"), [
    (entry(5, 10, 6, run="r2"), "another run"),
    (entry(5, 10, 6, lane=1), "another lane"),
    (entry(6, 10, 6), "a hole in the covered range"),
    (entry(4, 10, 6), "an overlap"),
    (entry(5, 10, 6, target_id="T2"), "another incarnation of the remote topic"),
    (entry(5, 10, 6, at=SETTLED), "committed too recently"),
    (entry(5, 5, 6), "an empty entry (a reset's)"),
])
def test_entries_stay_apart(second: MapEntry, why: str) -> None:
    rows = [stored(0, entry(0, 5, 0)), stored(1, second)]
    assert coalesce(rows, SETTLED) == rows, why


def test_entries_of_other_offset_map_topic_incarnations_stay_apart() -> None:
    rows = [stored(0, entry(0, 5, 0), topic_id="M1"), stored(1, entry(5, 10, 6), topic_id="M2")]
    assert len(coalesce(rows, SETTLED)) == 2


def test_only_neighbours_in_write_order_fold_so_a_later_overlap_still_wins() -> None:
    # given: run r1 wrote 0..5 and 5..10, run r2 then rewrote 3..8 (an at_least_once
    # crash), and r1's lane went on with 10..15 after it (offset-map offset 3)
    rows = [stored(0, entry(0, 5, 0)), stored(1, entry(5, 10, 6)),
            stored(2, entry(3, 8, 100, run="r2")), stored(3, entry(10, 15, 12))]
    folded = coalesce(rows, SETTLED)
    # then: r1's first two fold (nothing was written between them); 10..15 does not join
    # them across r2's entry
    assert [(r.first, r.last) for r in folded] == [(0, 1), (2, 2), (3, 3)]
    assert _answers(folded) == _answers(rows)


def test_a_folded_map_answers_every_offset_as_its_entries_did() -> None:
    rows = [*transactions(50, size=3), stored(50, entry(150, 160, 500, run="r2"))]
    folded = coalesce(rows, SETTLED)
    assert len(folded) == 2
    assert _answers(folded) == _answers(rows)


def test_a_row_holds_at_most_the_segments_it_may() -> None:
    folded = coalesce(transactions(10), SETTLED, max_segments=4)
    assert [r.folded for r in folded] == [4, 4, 2]


def test_a_folded_row_folds_on_with_later_entries() -> None:
    first = coalesce(transactions(3), SETTLED)
    later = stored(3, entry(15, 20, 18))
    (one,) = coalesce([*first, later], SETTLED)
    assert (one.first, one.last, one.entry.covered_end) == (0, 3, 20)
    assert foldable(first[0], later, SETTLED)
    assert one.entry.segments == (*first[0].entry.segments, *later.entry.segments)


@pytest.mark.parametrize(("segments", "joined"), [
    ([], ()),
    ([Segment(0, 0, 5), Segment(5, 5, 5)], (Segment(0, 0, 10),)),
    ([Segment(0, 0, 5), Segment(5, 6, 5)], (Segment(0, 0, 5), Segment(5, 6, 5))),
    ([Segment(0, 0, 5), Segment(6, 5, 5)], (Segment(0, 0, 5), Segment(6, 5, 5))),
    ([Segment(0, 0, 1), Segment(1, 1, 1), Segment(2, 2, 1)], (Segment(0, 0, 3),)),
])
def test_segments_that_continue_on_both_sides_join(segments: list[Segment],
                                                   joined: tuple[Segment, ...]) -> None:
    assert join(segments) == joined


@pytest.mark.parametrize(("candidate", "partition", "held"), [
    (0, 0, True), (3, 0, True), (7, 0, True), (8, 0, False), (9, 1, True), (12, 0, False),
    # another partition's entry between the folded ones is a row of its own
    (3, 1, False),
])
def test_a_folded_row_holds_the_keys_of_every_entry_of_its_partition_it_stands_for(
        candidate: int, partition: int, held: bool) -> None:
    columns = ("flow", "map_topic_id", "map_offset")
    where = {"flow": "f", "map_topic_id": "M", "source_topic": "t"}
    stored_rows = [where | {"map_offset": 0, "map_offset_end": 7, "source_partition": 0},
                   where | {"map_offset": 9, "map_offset_end": None, "source_partition": 1}]
    row = where | {"map_offset": candidate, "source_partition": partition}
    other_topic = dict(row, map_topic_id="N")
    assert held_keys(columns, stored_rows, [row, other_topic]) == (
        {("f", "M", candidate)} if held else set())


def _answers(rows: list[StoredEntry]) -> list[tuple[str, int | None] | None]:
    """Where each source offset 0..170 went (the run that wrote it, the target offset),
    overlaps resolved by write order as look-ups do; None where not mirrored."""
    entries = latest_cover([((r.map_topic_id, r.first), r.entry) for r in rows])
    found = [covering(entries, offset) for offset in range(170)]
    return [None if f is None else (f[0].run_id, f[1]) for f in found]


def test_consecutive_transactions_of_the_fixture_have_a_marker_between_them() -> None:
    a, b = transactions(2)
    assert b.entry.segments[0].target_start == a.entry.segments[0].target_end + 1

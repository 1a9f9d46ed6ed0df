"""Verification: digests keep what a mirror must keep; pairs come from the offset map;
altered and missing records are told apart; where the map's targets rise with its source
offsets both sides stream, in memory flat in the partition's size, to the same result."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterator

import pytest

from ferry.core.offsetmap import MapEntry, Segment
from ferry.core.verify import (
    ALTERED,
    MISSING,
    Comparison,
    Mismatch,
    Skipped,
    TargetSpan,
    compare_in_memory,
    compare_in_order,
    digest,
    iter_pairs,
    pairs,
    target_span,
)


def test_digest_covers_key_value_headers_and_timestamp() -> None:
    base = digest(b"k", b"v", [("h", b"1")], 10)
    assert base == digest(b"k", b"v", [("h", b"1")], 10)
    others = [digest(None, b"v", [("h", b"1")], 10), digest(b"", b"v", [("h", b"1")], 10),
              digest(b"k", None, [("h", b"1")], 10), digest(b"k", b"v", [("h", b"2")], 10),
              digest(b"k", b"v", [], 10), digest(b"k", b"v", [("h", b"1")], 11),
              digest(b"kv", b"", [("h", b"1")], 10)]
    assert base not in others and len(set(others)) == len(others)


def test_pairs_follow_the_segments_from_a_low_watermark() -> None:
    entries = [MapEntry("f", "r", 0, "t", 0, "A.t", 0, 0, 10,
                        (Segment(0, 0, 3), Segment(5, 4, 2)), 0)]
    assert pairs(entries) == [(0, 0), (1, 1), (2, 2), (5, 4), (6, 5)]
    assert pairs(entries, low=2) == [(2, 2), (5, 4), (6, 5)]


def test_compare_names_altered_and_missing_and_skips_what_retention_deleted() -> None:
    source = {0: b"a", 1: b"b", 2: b"c", 3: b"d"}
    target = {10: b"a", 11: b"B", 13: b"d"}
    found = compare_in_memory([(0, 10), (1, 11), (2, 12), (3, 13), (4, 14)], source, target)
    assert found.checked == 4  # source offset 4 is gone
    assert found.mismatches == [Mismatch(1, 11, ALTERED), Mismatch(2, 12, MISSING)]


@pytest.mark.parametrize(
    ("paired", "source", "target", "mismatches", "skipped"),
    [
        ([(0, 10), (1, 11), (2, 12)], [0, 1, 2], {}, [Mismatch(0, 10, MISSING, 3)], []),
        ([(0, 10), (1, 12)], [0, 1], {}, [Mismatch(0, 10, MISSING), Mismatch(1, 12, MISSING)],
         []),
        ([(0, 10), (2, 11)], [0, 2], {}, [Mismatch(0, 10, MISSING), Mismatch(2, 11, MISSING)],
         []),
        ([(0, 10), (1, 11), (2, 12)], [0, 1, 2], {10: b"x", 12: b"x"},
         [Mismatch(0, 10, ALTERED), Mismatch(1, 11, MISSING), Mismatch(2, 12, ALTERED)], []),
        ([(5, 10)], [0, 1, 2, 4, 5, 7, 8], {10: b"5"}, [],
         [Skipped(0, 3), Skipped(4, 5), Skipped(7, 9)]),
    ],
    ids=["consecutive-on-both-sides", "a-gap-on-the-target", "a-gap-on-the-source",
         "another-kind-between", "skipped-offsets-in-runs"],
)
def test_problems_are_kept_as_runs_of_consecutive_offsets(
        paired: list[tuple[int, int]], source: list[int], target: dict[int, bytes],
        mismatches: list[Mismatch], skipped: list[Skipped]) -> None:
    digests = {o: str(o).encode() for o in source}
    for found in (compare_in_memory(paired, digests, target),
                  compare_in_order(paired, sorted(digests.items()), sorted(target.items()))):
        assert (found.mismatches, found.skipped) == (mismatches, skipped)
        assert found.count(MISSING) + found.count(ALTERED) == sum(
            m.records for m in mismatches)
        assert found.skipped_records == sum(s.end - s.start for s in skipped)


def _entry(*segments: tuple[int, int, int], covered: tuple[int, int] = (0, 100)) -> MapEntry:
    return MapEntry("f", "r", 0, "t", 0, "A.t", 0, covered[0], covered[1],
                    tuple(Segment(*seg) for seg in segments), 0)


@pytest.mark.parametrize(
    ("entries", "low", "span"),
    [
        ([], 0, None),
        ([_entry()], 0, None),
        ([_entry((0, 10, 3), (5, 13, 2))], 0, TargetSpan(10, 15, True)),
        ([_entry((0, 10, 3), (5, 13, 2))], 4, TargetSpan(13, 15, True)),
        ([_entry((0, 10, 3), (5, 13, 2))], 7, None),
        ([_entry((0, 10, 3)), _entry((3, 20, 3))], 0, TargetSpan(10, 23, True)),
        ([_entry((0, 20, 3)), _entry((3, 10, 3))], 0, TargetSpan(10, 23, False)),
        ([_entry((0, 20, 3)), _entry((3, 10, 3))], 3, TargetSpan(10, 13, True)),
        ([_entry((0, 10, 3), (2, 13, 2))], 0, TargetSpan(10, 15, False)),
    ],
    ids=["no-entries", "no-records", "rising", "from-a-low-watermark", "all-below-low",
         "rising-across-entries", "a-later-range-written-earlier", "the-earlier-range-deleted",
         "source-offsets-overlapping"],
)
def test_the_target_span_says_whether_targets_rise_with_source_offsets(
        entries: list[MapEntry], low: int, span: TargetSpan | None) -> None:
    assert target_span(entries, low) == span


def test_pairs_stream_lazily_in_source_order() -> None:
    many = _entry((0, 0, 10**12))  # far too many to hold in memory
    first = iter_pairs([many], low=5)
    assert [next(first) for _ in range(3)] == [(5, 5), (6, 6), (7, 7)]


def _history(seed: int) -> tuple[list[tuple[int, int]], dict[int, bytes], dict[int, bytes]]:
    """A random partition: source records (some deleted by retention or never mirrored),
    pairs rising on both sides, and a target with altered, missing and extra records."""
    rng = random.Random(seed)
    paired: list[tuple[int, int]] = []
    source: dict[int, bytes] = {}
    target: dict[int, bytes] = {}
    t = rng.randrange(50)
    for s in range(rng.randrange(1, 200)):
        if rng.random() < 0.1:
            continue  # a marker, an aborted record: no record at this offset
        source[s] = f"d{s}".encode()
        if rng.random() < 0.05:
            continue  # never mirrored: skipped
        while rng.random() < 0.05:
            target[t] = b"a duplicate"  # extra
            t += 1
        paired.append((s, t))
        roll = rng.random()
        if roll < 0.9:
            target[t] = source[s]
        elif roll < 0.95:
            target[t] = b"other"  # altered
        t += 1  # else missing
    for s in rng.sample(sorted(source), k=len(source) // 10):
        del source[s]  # deleted by retention since
    return paired, source, target


@pytest.mark.parametrize("seed", range(40))
def test_streaming_in_order_finds_what_comparing_in_memory_finds(seed: int) -> None:
    paired, source, target = _history(seed)
    span = (paired[0][1], paired[-1][1] + 1) if paired else (0, 0)
    in_range = {o: d for o, d in target.items() if span[0] <= o < span[1]}

    streamed = compare_in_order(iter(paired), iter(sorted(source.items())),
                                iter(sorted(in_range.items())))

    assert streamed == compare_in_memory(paired, source, in_range)


def test_comparing_in_memory_names_what_is_skipped_and_extra() -> None:
    source = {0: b"a", 1: b"b", 2: b"c", 3: b"d"}
    target = {10: b"a", 11: b"x", 12: b"B", 14: b"d"}
    assert compare_in_memory([(0, 10), (1, 12), (3, 14)], source, target) == Comparison(
        checked=3, mismatches=[Mismatch(1, 12, ALTERED)], skipped=[Skipped(2, 3)], extra=1)


def test_streaming_holds_memory_flat_in_the_partitions_size() -> None:
    records = 100_000

    def digests(first: int) -> Iterator[tuple[int, bytes]]:
        return ((first + o, b"%032d" % o) for o in range(records))

    tracemalloc.start()
    try:
        result = compare_in_order(iter_pairs([_entry((0, 10, records))]), digests(0),
                                  digests(10))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert result == Comparison(checked=records)
    assert peak < 1_000_000  # holding one side's digests alone would take over 10 MB


def test_a_partition_nothing_of_which_arrived_is_held_in_a_few_runs() -> None:
    """A mirror that lost a whole partition, or never wrote half of it: what the comparison
    holds stays as small as when everything is equal."""
    records = 100_000

    def digests(first: int, count: int) -> Iterator[tuple[int, bytes]]:
        return ((first + o, b"%032d" % o) for o in range(count))

    tracemalloc.start()
    try:
        result = compare_in_order(iter_pairs([_entry((0, 10, records // 2))]),
                                  digests(0, records), iter(()))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert result == Comparison(checked=records // 2,
                                mismatches=[Mismatch(0, 10, MISSING, records // 2)],
                                skipped=[Skipped(records // 2, records)])
    assert peak < 1_000_000  # one entry per record would take over 5 MB

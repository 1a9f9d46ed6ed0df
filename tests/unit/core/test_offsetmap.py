"""Segments, map entries and their wire format: exact across source and target gaps."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ferry.core.offsetmap import (
    MapEntry,
    Segment,
    SegmentBuilder,
    SegmentError,
    check_contiguous,
    decode,
    encode,
    lookup,
    split_entry,
)


@pytest.mark.parametrize(
    ("sources", "target_first", "segments"),
    [
        ([0, 1, 2, 3], 100, [(0, 100, 4)]),
        ([0, 1, 3, 4], 0, [(0, 0, 2), (3, 2, 2)]),  # a marker at source offset 2
        ([5, 9, 10, 20], 7, [(5, 7, 1), (9, 8, 2), (20, 10, 1)]),  # compaction holes
        ([42], 0, [(42, 0, 1)]),
    ],
    ids=["contiguous", "marker", "compacted", "single"],
)
def test_segments_break_at_source_gaps(
    sources: list[int], target_first: int, segments: list[tuple[int, int, int]]
) -> None:
    builder = SegmentBuilder()
    for offset in sources:
        builder.add(offset)
    got = builder.finish(target_first, target_first + len(sources) - 1)
    assert got == tuple(Segment(*s) for s in segments)
    for source, target in zip(sources, range(target_first, target_first + len(sources)),
                              strict=True):
        assert any(s.target_of(source) == target for s in got)


def test_non_contiguous_target_offsets_mean_another_writer() -> None:
    builder = SegmentBuilder()
    for offset in (0, 1, 2):
        builder.add(offset)
    with pytest.raises(SegmentError, match="another producer"):
        builder.finish(10, 13)


def test_source_offsets_must_increase() -> None:
    builder = SegmentBuilder()
    builder.add(5)
    with pytest.raises(SegmentError):
        builder.add(5)


def entry(cs: int, ce: int, segments: list[tuple[int, int, int]]) -> MapEntry:
    return MapEntry("A->B", "run-1", 0, "orders", 3, "A.orders", 3, cs, ce,
                    tuple(Segment(*s) for s in segments), 1_700_000_000_000)


def test_wire_format_round_trips() -> None:
    original = entry(0, 12, [(0, 0, 5), (6, 5, 5)])
    key, value = encode(original)
    assert key == b"A->B|orders|3"
    assert decode(value) == original
    assert original.records == 10


def test_decode_refuses_other_versions() -> None:
    with pytest.raises(ValueError, match="version-1"):
        decode(b'{"v": 2}')


@pytest.mark.parametrize(
    ("source", "expected"),
    [(0, 0), (4, 4), (5, None), (6, 5), (10, 9), (11, None), (12, 11), (13, None), (99, None)],
    ids=["first", "end-of-run", "marker", "after-marker", "last-of-entry", "trailing-marker",
         "next-entry", "uncovered-hole", "never-mirrored"],
)
def test_lookup(source: int, expected: int | None) -> None:
    entries = [entry(0, 12, [(0, 0, 5), (6, 5, 5)]), entry(12, 13, [(12, 11, 1)])]
    found = lookup(entries, source)
    if source >= 13:
        assert found is None
    else:
        assert found is not None and found[1] == expected


def test_contiguity_check_names_holes() -> None:
    assert check_contiguous([entry(0, 5, []), entry(5, 9, [])]) == []
    assert check_contiguous([entry(0, 5, []), entry(6, 9, [])]) == [
        "orders-3: covered 0..5 then 6..9"]


@pytest.mark.parametrize(
    ("source", "expected"),
    [(0, (0, 0)), (5, (6, 5)), (11, (12, 11)), (13, None)],
    ids=["exact", "marker-to-next", "trailing-marker-to-next-entry", "past-the-end"],
)
def test_next_mirrored(source: int, expected: tuple[int, int] | None) -> None:
    from ferry.core.offsetmap import next_mirrored

    entries = [entry(0, 12, [(0, 0, 5), (6, 5, 5)]), entry(12, 13, [(12, 11, 1)])]
    assert next_mirrored(entries, source) == expected


def test_runs_rows_are_rebuilt_only_for_runs_without_any() -> None:
    from ferry.core.tables import REBUILT, runs_from_entries

    lost = [MapEntry("A->B", "lost", 1, "orders", 3, "A.orders", 3, 0, 10,
                     (Segment(0, 0, 10),), 1_000_000, bytes=100),
            MapEntry("A->B", "lost", 1, "orders", 3, "A.orders", 3, 10, 15,
                     (Segment(10, 11, 5),), 1_004_000, bytes=50)]
    kept = [entry(15, 20, [(15, 17, 5)])]
    rows = runs_from_entries(lost + kept, recorded_runs={"run-1"}, delivery="exactly_once")
    assert len(rows) == 1
    row = rows[0]
    assert (row["run_id"], row["lane"], row["topic"], row["partition"]) == ("lost", 1, "orders", 3)
    assert (row["range_start"], row["range_end"], row["records"], row["bytes"]) == (0, 15, 15, 150)
    assert row["seconds"] == 4.0 and row["error"] == REBUILT


def test_rows_rebuilt_from_entries_with_their_lanes_times_are_the_lanes_own() -> None:
    from ferry.core.tables import runs_from_entries

    timed = [MapEntry("A->B", "left", 1, "orders", 3, "A.orders", 3, 0, 10,
                      (Segment(0, 0, 10),), 1_000_500, bytes=100, lane_started_ms=999_000,
                      age_ms=750),
             MapEntry("A->B", "left", 1, "orders", 3, "A.orders", 3, 10, 15,
                      (Segment(10, 10, 5),), 1_002_000, bytes=50, lane_started_ms=999_000,
                      age_ms=750)]
    (row,) = runs_from_entries(timed, recorded_runs=set(), delivery="exactly_once")
    # the lane's time from its start to its last commit, and the age it read: no note
    assert (row["seconds"], row["max_record_age_ms"], row["error"]) == (3.0, 750, "")
    assert (row["range_start"], row["range_end"], row["records"], row["bytes"]) == (0, 15, 15, 150)


def test_a_lanes_times_travel_in_the_wire_format_and_older_entries_decode_without() -> None:
    plain = entry(0, 5, [(0, 0, 5)])
    timed = MapEntry(**{**plain.__dict__, "lane_started_ms": 123, "age_ms": 45})
    assert b'"ls"' not in encode(plain)[1] and b'"ag"' not in encode(plain)[1]
    back = decode(encode(timed)[1])
    assert (back.lane_started_ms, back.age_ms) == (123, 45)
    assert (decode(encode(plain)[1]).lane_started_ms, decode(encode(plain)[1]).age_ms) == (0, 0)


def test_duplicates_travel_in_the_wire_format_only_when_there_are_some() -> None:
    plain = entry(0, 5, [(0, 0, 5)])
    counted = MapEntry(**{**plain.__dict__, "duplicates": 3})

    assert b'"d"' not in encode(plain)[1]
    assert decode(encode(counted)[1]).duplicates == 3
    assert [p.duplicates for p in split_entry(
        MapEntry(**{**entry(0, 12, [(0, 0, 5), (6, 5, 5)]).__dict__, "duplicates": 3}), 1)] == [
        3, 0]


def test_entries_without_bytes_still_decode() -> None:
    _, value = encode(entry(0, 1, [(0, 0, 1)]))
    assert b',"b":0' in value
    legacy = value.replace(b',"b":0', b"")
    assert decode(legacy).bytes == 0


def test_the_runs_arrow_schema_is_derived_from_the_table_ddl() -> None:
    from ferry.core.tables import RUNS_DDL
    from ferry.state.writer import arrow_schema

    schema = arrow_schema(RUNS_DDL)
    assert schema.names == [c.split(" ")[0] for c in RUNS_DDL.split(", ")]
    assert str(schema.field("partition").type) == "int32"
    assert str(schema.field("finished_at").type) == "timestamp[us, tz=UTC]"


def test_reading_the_entries_of_no_topic_reads_nothing(tmp_path: Path) -> None:
    from ferry.state.reader import map_rows
    from ferry.state.writer import append

    path = str(tmp_path / "offset_map")
    append(path, "flow string, source_topic string, schema_version int", [
        {"flow": "A->B", "source_topic": "t", "schema_version": 1}])
    assert map_rows(path, "A->B", set()) == []  # (pyarrow refuses an empty isin filter)


@pytest.mark.parametrize(
    ("max_segments", "covered"),
    [
        (10, [(0, 40)]),
        (4, [(0, 40)]),
        (3, [(0, 31), (31, 40)]),
        (2, [(0, 21), (21, 40)]),
        (1, [(0, 11), (11, 21), (21, 31), (31, 40)]),
    ],
    ids=["fits", "exactly-full", "two-pieces", "three-pieces", "one-segment-each"],
)
def test_an_entry_with_too_many_segments_splits_into_contiguous_pieces(
    max_segments: int, covered: list[tuple[int, int]]
) -> None:
    # given: a transaction covering source 0..39 whose records broke into 4 segments
    whole = entry(0, 40, [(1, 0, 5), (11, 5, 5), (21, 10, 5), (31, 15, 5)])
    whole = MapEntry(**{**whole.__dict__, "bytes": 999})

    pieces = split_entry(whole, max_segments)

    assert [(p.covered_start, p.covered_end) for p in pieces] == covered
    assert check_contiguous(pieces) == []
    assert all(len(p.segments) <= max_segments for p in pieces)
    assert tuple(s for p in pieces for s in p.segments) == whole.segments
    assert sum(p.bytes for p in pieces) == 999
    for source in range(0, 40):  # every look-up answers as the whole entry did
        found = lookup(pieces, source)
        assert found is not None and found[1] == whole.target_of(source)


def test_a_record_is_found_among_an_entrys_thousands_of_segments_as_a_walk_finds_it() -> None:
    # given: an entry of a compacted source, a hole after every kept record
    segments = [(1_000 + 3 * i, 500 + i, 2) for i in range(2_000)]
    whole = entry(1_000, 7_000, segments)

    # then: every covered offset (records and holes) answers as walking the segments does
    for source in range(999, 7_001):
        walked = next((t + source - s for s, t, n in segments if s <= source < s + n), None)
        assert whole.target_of(source) == walked, source


def test_an_entry_of_sixty_thousand_segments_encodes_below_the_broker_record_limit() -> None:
    base = 10_000_000  # a partition some way into its life
    whole = entry(base, base + 120_000, [(base + 2 * i, base + i, 1) for i in range(60_000)])
    assert len(encode(whole)[1]) > 1_000_000  # one entry would be refused by the broker
    assert max(len(encode(p)[1]) for p in split_entry(whole)) < 500_000


@pytest.mark.parametrize(
    ("older", "newer", "cover"),
    [
        ((0, 10), (10, 20), [(0, 10), (10, 20)]),
        ((0, 10), (5, 20), [(0, 5), (5, 20)]),
        ((0, 20), (5, 10), [(0, 5), (5, 10), (10, 20)]),
        ((5, 10), (0, 20), [(0, 20)]),
    ],
    ids=["adjacent", "partial-overlap-keeps-the-older-head", "inside-splits-the-older",
         "covered-whole"],
)
def test_overlapping_entries_resolve_to_the_later_written_and_keep_the_rest_of_the_older(
    older: tuple[int, int], newer: tuple[int, int], cover: list[tuple[int, int]]
) -> None:
    from ferry.core.offsetmap import latest_cover

    old = entry(older[0], older[1], [(older[0], 100 + older[0], older[1] - older[0])])
    new = entry(newer[0], newer[1], [(newer[0], 500 + newer[0], newer[1] - newer[0])])

    got = latest_cover([(1, old), (2, new)])

    assert [(e.covered_start, e.covered_end) for e in got] == cover
    for source in range(min(older[0], newer[0]), max(older[1], newer[1])):
        found = lookup(got, source)
        assert found is not None
        expected = (new if newer[0] <= source < newer[1] else old).target_of(source)
        assert found[1] == expected, source


@pytest.mark.parametrize("seed", range(40))
def test_each_offset_of_many_overlapping_entries_resolves_to_the_latest_written_covering_it(
    seed: int
) -> None:
    # given: entries written in some order over overlapping, adjacent and nested ranges,
    # empty ones among them, with holes in their segments
    import random

    from ferry.core.offsetmap import covering as covering_of
    from ferry.core.offsetmap import latest_cover

    rnd = random.Random(seed)
    written = []
    for order in range(rnd.randint(1, 30)):
        low = rnd.randint(0, 60)
        high = low + rnd.randint(0, 20)
        target = rnd.randint(0, 10_000)
        written.append(((rnd.randint(0, 3), order), entry(low, high, [
            (offset, target + offset, 1) for offset in range(low, high) if offset % 4])))

    got = latest_cover(written)

    # then: the pieces are disjoint, in source order, and each offset answers as the
    # entry written last of those that cover it
    pieces = [e for e in got if e.covered_start < e.covered_end]
    assert all(a.covered_end <= b.covered_start for a, b in itertools.pairwise(pieces))
    for offset in range(0, 82):
        covering = [e for _, e in sorted(written, key=lambda pair: pair[0])
                    if e.covered_start <= offset < e.covered_end]
        found = lookup(pieces, offset)
        assert covering_of(got, offset) == found  # by binary search, empty entries among them
        if not covering:
            assert found is None, offset
        else:
            assert found is not None and found[1] == covering[-1].target_of(offset), offset


def test_a_range_that_failed_and_was_copied_on_retry_counts_as_copied() -> None:
    from datetime import UTC, datetime, timedelta

    from ferry.core.tables import final_attempts

    first = datetime(2026, 1, 1, tzinfo=UTC)
    row = {"run_id": "r", "topic": "t", "partition": 0, "range_start": 0}
    attempts = [row | {"outcome": "failed", "finished_at": first},
                row | {"outcome": "copied", "finished_at": first + timedelta(seconds=40)},
                row | {"range_start": 100, "outcome": "failed", "finished_at": first}]
    assert sorted((r["range_start"], r["outcome"]) for r in final_attempts(attempts)) == [
        (0, "copied"), (100, "failed")]


@pytest.mark.parametrize(
    ("outcomes", "final"),
    [(["failed", "copied"], ("copied", 50)), (["copied", "skipped"], ("copied", 50)),
     (["failed", "skipped"], ("skipped", 0)), (["copied", "failed"], ("failed", 0)),
     (["skipped", "copied"], ("copied", 50))],
    ids=["failed-then-copied", "a-retry-found-it-committed", "nothing-copied-by-this-run",
         "the-later-attempt-failed", "copied-on-retry"],
)
def test_the_final_attempt_at_a_range_keeps_the_records_this_run_copied(
    outcomes: list[str], final: tuple[str, int]
) -> None:
    from datetime import UTC, datetime, timedelta

    from ferry.core.tables import final_attempts

    first = datetime(2026, 1, 1, tzinfo=UTC)
    row = {"run_id": "r", "topic": "t", "partition": 0, "range_start": 0}
    attempts = [row | {"outcome": o, "records": 50 if o == "copied" else 0,
                       "finished_at": first + timedelta(seconds=40 * i)}
                for i, o in enumerate(outcomes)]
    for given in (attempts, attempts[::-1]):  # read back in any order
        (kept,) = final_attempts(given)
        assert (kept["outcome"], kept["records"]) == final

"""Aligning a partition MirrorMaker 2 already mirrored: each source record maps to its first
copy; replays, losses, foreign records and alterations are told apart; memory stays flat;
the adopted history becomes contiguous offset-map entries."""

from __future__ import annotations

import itertools
import random
import tracemalloc
from collections.abc import Iterator, Sequence

import pytest

from ferry.core.alignment import (
    ALTERED,
    DOUBLED,
    EXTRA,
    MISSING,
    AlignmentSummary,
    Finding,
    Record,
    adopted_entries,
    align,
)
from ferry.core.offsetmap import MAX_ENTRY_SEGMENTS, MapEntry, Segment, check_contiguous, lookup

Item = tuple[object, ...]


def records(letters: str, first: int = 0, offsets: Sequence[int] | None = None) -> list[Record]:
    """One record per letter (its digest), at `offsets` or from `first` on."""
    at = range(first, first + len(letters)) if offsets is None else offsets
    assert len(at) == len(letters)
    return [(offset, letter.encode()) for offset, letter in zip(at, letters, strict=True)]


def seg(source: int, target: int, count: int) -> Segment:
    return Segment(source, target, count)


def missing(start: int, end: int, count: int | None = None) -> Finding:
    return Finding(MISSING, start, end, None, None, end - start if count is None else count)


def extra(start: int, end: int) -> Finding:
    return Finding(EXTRA, None, None, start, end, end - start)


def doubled(source: tuple[int, int], target: tuple[int, int], count: int) -> Finding:
    return Finding(DOUBLED, *source, *target, count)


def altered(source: int, target: int) -> Finding:
    return Finding(ALTERED, source, source + 1, target, target + 1, 1)


def run(source: list[Record], target: list[Record], window: int = 100_000
        ) -> tuple[list[Segment | Finding], AlignmentSummary]:
    summary = AlignmentSummary()
    return list(align(source, target, window=window, summary=summary)), summary


def check_invariants(out: list[Segment | Finding], summary: AlignmentSummary,
                     source: list[Record], target: list[Record]) -> None:
    """What every alignment must satisfy, whatever the heuristics decided."""
    segments = [item for item in out if isinstance(item, Segment)]
    findings = [item for item in out if isinstance(item, Finding)]
    assert all(segment.count > 0 for segment in segments)
    for before, after in itertools.pairwise(segments):
        assert after.source_start >= before.source_end
        assert after.target_start >= before.target_end
    s_digest, t_digest = dict(source), dict(target)
    for segment in segments:  # every pair holds equal records
        for i in range(segment.count):
            assert s_digest[segment.source_start + i] == t_digest[segment.target_start + i]
    # every record is accounted for exactly once
    s_used = [s for segment in segments for s in range(segment.source_start, segment.source_end)]
    t_used = [t for segment in segments for t in range(segment.target_start, segment.target_end)]
    for finding in findings:
        inside_s = [o for o, _ in source if finding.source_start is not None
                    and finding.source_end is not None
                    and finding.source_start <= o < finding.source_end]
        inside_t = [o for o, _ in target if finding.target_start is not None
                    and finding.target_end is not None
                    and finding.target_start <= o < finding.target_end]
        if finding.kind != DOUBLED:  # a doubled finding's source records are paired ones
            s_used += inside_s
        t_used += inside_t
        assert finding.count == len(inside_t if finding.kind != MISSING else inside_s)
    assert sorted(s_used) == [o for o, _ in source]
    assert sorted(t_used) == [o for o, _ in target]
    assert summary.matched == sum(s.count for s in segments)
    for kind in (MISSING, DOUBLED, EXTRA, ALTERED):
        assert getattr(summary, kind) == sum(f.count for f in findings if f.kind == kind)
    assert summary.matched + summary.missing + summary.altered == len(source)
    assert summary.matched + summary.doubled + summary.extra + summary.altered == len(target)
    assert summary.last_source == max((s.source_end - 1 for s in segments), default=None)
    assert summary.last_target == (target[-1][0] if target else None)


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        (records("abcde"), records("abcde", 100), [seg(0, 100, 5)]),
        (records("abcde", offsets=[0, 1, 3, 4, 5]), records("abcde", 100),
         [seg(0, 100, 2), seg(3, 102, 3)]),
        (records("abcde"), records("abcde", offsets=[10, 11, 12, 14, 15]),
         [seg(0, 10, 3), seg(3, 14, 2)]),
        (records("abcdefgh"), records("abcdecdefgh"),
         [seg(0, 0, 5), doubled((2, 5), (5, 8), 3), seg(5, 8, 3)]),
        (records("abcde"), records("abcdecde"), [seg(0, 0, 5), doubled((2, 5), (5, 8), 3)]),
        (records("abcde", offsets=[0, 1, 2, 4, 5]), records("abcdecde"),
         [seg(0, 0, 3), seg(4, 3, 2), doubled((2, 6), (5, 8), 3)]),
        (records("abcdefg"), records("abfg"), [seg(0, 0, 2), missing(2, 5), seg(5, 2, 2)]),
        (records("abcdef", offsets=[0, 1, 2, 4, 5, 6]), records("abf"),
         [seg(0, 0, 2), missing(2, 6, count=3), seg(6, 2, 1)]),
        (records("xyabc"), records("abc"), [missing(0, 2), seg(2, 0, 3)]),
        (records("abcd"), records("ab"), [seg(0, 0, 2), missing(2, 4)]),
        (records("abc"), records("xyzabc"), [extra(0, 3), seg(0, 3, 3)]),
        (records("abcd"), records("abxyzcd"), [seg(0, 0, 2), extra(2, 5), seg(2, 5, 2)]),
        (records("ab"), records("abxy"), [seg(0, 0, 2), extra(2, 4)]),
        (records("abcde"), records("abXde"), [seg(0, 0, 2), altered(2, 2), seg(3, 3, 2)]),
        (records("abc"), records("Xbc"), [altered(0, 0), seg(1, 1, 2)]),
        (records("abc"), records("abX"), [seg(0, 0, 2), altered(2, 2)]),
        (records("aabaab"), records("aabaab"), [seg(0, 0, 6)]),
        (records("aaaa"), records("aaaaaa"), [seg(0, 0, 4), doubled((3, 4), (4, 5), 1),
                                              doubled((3, 4), (5, 6), 1)]),
        (records("ababc"), records("abababc"),
         [seg(0, 0, 4), doubled((2, 4), (4, 6), 2), seg(4, 6, 1)]),
        (records("abcabd"), records("abcabcabd"),
         [seg(0, 0, 5), doubled((2, 5), (5, 8), 3), seg(5, 8, 1)]),
        (records(""), records("ab"), [extra(0, 2)]),
        (records("ab"), records(""), [missing(0, 2)]),
        (records(""), records(""), []),
    ],
    ids=["identical", "source-gap", "target-gap", "replay-in-the-middle", "replay-at-the-end",
         "replay-across-a-source-marker", "missing-run", "missing-across-a-source-gap",
         "missing-at-start", "missing-at-end", "extra-at-start", "extra-in-the-middle",
         "extra-at-end", "altered-record", "altered-first", "altered-last",
         "repeated-source-records-pair-in-order", "repeated-record-replayed-twice",
         "replay-of-repeated-records", "replay-ending-on-a-repeat", "empty-source",
         "empty-target", "both-empty"],
)
def test_align_maps_each_source_record_to_its_first_copy(
    source: list[Record], target: list[Record], expected: list[Segment | Finding]
) -> None:
    out, summary = run(source, target)
    assert out == expected
    check_invariants(out, summary, source, target)


def test_a_long_replay_is_one_doubled_finding() -> None:
    # given MM2 re-sent 3,000 records after a restart
    source = [(i, i.to_bytes(4, "big")) for i in range(6_000)]
    sent = source[:5_000] + source[2_000:5_000] + source[5_000:]
    target = [(100 + i, d) for i, (_, d) in enumerate(sent)]
    # when
    out, summary = run(source, target)
    # then
    assert out == [seg(0, 100, 5_000), doubled((2_000, 5_000), (5_100, 8_100), 3_000),
                   seg(5_000, 8_100, 1_000)]
    check_invariants(out, summary, source, target)


def test_a_replay_reaching_back_a_whole_window_is_recognised() -> None:
    source = [(i, i.to_bytes(4, "big")) for i in range(300)]
    sent = source[:200] + source[100:200] + source[200:]
    target = [(i, d) for i, (_, d) in enumerate(sent)]
    out, _ = run(source, target, window=100)
    assert out == [seg(0, 0, 200), doubled((100, 200), (200, 300), 100), seg(200, 300, 100)]


def test_runs_longer_than_the_window_come_out_altered() -> None:
    # a documented limit: 5 lost records are out of a window of 3
    source = records("abcdefghij")
    target = records("fghij")
    out, summary = run(source, target, window=3)
    assert out == [Finding(ALTERED, 0, 5, 0, 5, 5), missing(5, 10)]
    check_invariants(out, summary, source, target)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (records("ab", offsets=[1, 1]), records("ab")),
        (records("ab"), records("ab", offsets=[5, 4])),
        (records("a", offsets=[-1]), records("a")),
    ],
    ids=["repeated-source-offset", "decreasing-target-offset", "negative-offset"],
)
def test_offsets_that_do_not_increase_are_refused(
    source: list[Record], target: list[Record]
) -> None:
    with pytest.raises(ValueError, match="must increase"):
        run(source, target)


def test_a_window_below_one_is_refused_at_the_call() -> None:
    with pytest.raises(ValueError, match="window"):
        align([], [], window=0)


def mirror(source: list[Record], rng: random.Random
           ) -> tuple[list[Record], dict[int, int | None]]:
    """A target MM2 could have written from `source` (replays, losses, foreign records,
    alterations) and each source offset's first exact copy (None when it has none)."""
    sent: list[tuple[str, int]] = []  # ("src"|"alt", source index) or ("foreign", serial)
    for i in range(len(source)):
        roll = rng.random()
        if roll < 0.03:
            continue  # lost for good
        if roll < 0.05:
            sent.append(("foreign", len(sent)))
        if roll < 0.06:
            sent.append(("alt", i))
            continue
        sent.append(("src", i))
        if rng.random() < 0.02:  # a restart: re-send a run of what was sent, none altered
            tail = sent[-rng.randint(1, 40):]
            kept = [e for e in tail if e[0] != "foreign"]
            if all(e[0] == "src" for e in kept):
                sent.extend(kept)
    target: list[Record] = []
    first: dict[int, int | None] = {offset: None for offset, _ in source}
    offset = 1_000
    for kind, i in sent:
        offset += 1 + (rng.random() < 0.05)  # transaction markers on the target
        if kind == "foreign":
            target.append((offset, b"foreign-%d" % i))
        elif kind == "alt":
            target.append((offset, b"altered-" + source[i][1]))
        else:
            target.append((offset, source[i][1]))
            if first[source[i][0]] is None:
                first[source[i][0]] = offset
    return target, first


def random_source(rng: random.Random, size: int, alphabet: int | None) -> list[Record]:
    offsets = sorted(rng.sample(range(size * 2), size))  # compaction holes and markers
    return [(o, (rng.randrange(alphabet) if alphabet else o).to_bytes(4, "big"))
            for o in offsets]


@pytest.mark.parametrize("seed", range(8))
def test_random_histories_map_every_source_record_to_its_first_copy(seed: int) -> None:
    # given unique records and what MM2 made of them
    rng = random.Random(seed)
    source = random_source(rng, 3_000, alphabet=None)
    target, first = mirror(source, rng)
    # when
    out, summary = run(source, target, window=500)
    # then
    check_invariants(out, summary, source, target)
    mapped = {s.source_start + i: s.target_start + i
              for s in out if isinstance(s, Segment) for i in range(s.count)}
    altered_sources = {o for f in out if isinstance(f, Finding) and f.kind == ALTERED
                       for o in range(f.source_start or 0, f.source_end or 0)}
    for offset, copy in first.items():
        if offset not in altered_sources:
            assert mapped.get(offset) == copy, offset


@pytest.mark.parametrize("seed", range(8))
def test_random_histories_of_repeating_records_keep_the_invariants(seed: int) -> None:
    rng = random.Random(100 + seed)
    source = random_source(rng, 2_000, alphabet=5)
    target, _ = mirror(source, rng)
    out, summary = run(source, target, window=rng.choice([1, 7, 300]))
    check_invariants(out, summary, source, target)


class Counted:
    """A record stream that counts what was pulled from it: `skip` leaves a record out,
    `gap_every` leaves an offset free before every so many records."""

    def __init__(self, size: int, skip: int = -1, gap_every: int = 0) -> None:
        self.size, self.skip, self.gap_every, self.pulled = size, skip, gap_every, 0

    def __iter__(self) -> Iterator[Record]:
        offset = 0
        for i in range(self.size):
            if i == self.skip:
                continue
            if self.gap_every and i and i % self.gap_every == 0:
                offset += 1
            self.pulled += 1
            yield offset, i.to_bytes(4, "big")
            offset += 1


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (Counted(300_000), Counted(300_000, skip=10)),
        (Counted(300_000, gap_every=500), Counted(300_000)),
        (Counted(300_000), Counted(300_000, gap_every=500)),
    ],
    ids=["a-lost-record-fills-the-lookahead", "segments-break-at-source-gaps",
         "segments-break-at-target-gaps"],
)
def test_align_reads_lazily_and_buffers_at_most_a_window(
    source: Counted, target: Counted
) -> None:
    window = 1_000
    done = 0  # source records yielded so far
    for item in align(source, target, window=window):
        done += item.count
        # nothing is read further than a window beyond what was yielded
        assert source.pulled <= done + window + 1
        assert target.pulled <= done + window + 1
    assert done == 300_000
    assert source.pulled == source.size - (source.skip >= 0)
    assert target.pulled == target.size - (target.skip >= 0)


def test_align_memory_stays_flat_in_partition_size() -> None:
    # given 300,000 records with a loss and a replay, streamed
    def source() -> Iterator[Record]:
        for i in range(300_000):
            yield i, i.to_bytes(8, "big")

    def target() -> Iterator[Record]:
        copies = itertools.chain(range(100_000), range(99_500, 100_000), range(100_100, 300_000))
        for offset, i in enumerate(copies):
            yield offset, i.to_bytes(8, "big")

    summary = AlignmentSummary()
    tracemalloc.start()
    try:
        for _ in align(source(), target(), window=1_000, summary=summary):
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # then: 300,000 records held at once would take over 30 MB
    assert (summary.matched, summary.doubled, summary.missing) == (299_900, 500, 100)
    assert peak < 2_000_000


def entries(segments: list[Segment], start: int, end: int, chunk: int) -> list[MapEntry]:
    return list(adopted_entries(
        segments, flow="A->B", run_id="adopt-1", source_topic="orders", source_partition=3,
        target_topic="A.orders", target_partition=3, covered_start=start, covered_end=end,
        committed_at_ms=1_700_000_000_000, chunk_records=chunk))


@pytest.mark.parametrize(
    ("segments", "start", "end", "chunk", "expected"),
    [
        ([seg(0, 100, 3), seg(5, 103, 2), seg(9, 105, 1)], 0, 12, 3,
         [(0, 5, [(0, 100, 3)], 103), (5, 12, [(5, 103, 2), (9, 105, 1)], 106)]),
        ([seg(10, 1_000, 250)], 0, 300, 100,
         [(0, 110, [(10, 1_000, 100)], 1_100), (110, 210, [(110, 1_100, 100)], 1_200),
          (210, 300, [(210, 1_200, 50)], 1_250)]),
        ([seg(2, 7, 2), seg(6, 9, 3)], 0, 10, 4,
         [(0, 8, [(2, 7, 2), (6, 9, 2)], 11), (8, 10, [(8, 11, 1)], 12)]),
        ([], 0, 50, 10, [(0, 50, [], None)]),
        ([], 7, 7, 10, []),
    ],
    ids=["chunks-follow-segments", "a-long-segment-is-split", "split-inside-a-later-segment",
         "no-segments-one-entry", "empty-range-nothing"],
)
def test_adopted_entries_cover_the_range_contiguously(
    segments: list[Segment], start: int, end: int, chunk: int,
    expected: list[tuple[int, int, list[tuple[int, int, int]], int | None]],
) -> None:
    got = entries(segments, start, end, chunk)
    assert [(e.covered_start, e.covered_end, [(s.source_start, s.target_start, s.count)
                                              for s in e.segments], e.target_end)
            for e in got] == expected
    assert check_contiguous(got) == []
    assert all(e.lane == -1 and e.bytes == 0 and e.records <= chunk for e in got)
    for e in got:
        assert all(e.covered_start <= s.source_start and s.source_end <= e.covered_end
                   for s in e.segments)
    for segment in segments:  # look-ups find every original pair
        for i in range(segment.count):
            found = lookup(got, segment.source_start + i)
            assert found is not None and found[1] == segment.target_start + i


def test_adopted_entries_hold_at_most_max_entry_segments() -> None:
    # a compacted source: one segment per record
    segments = [seg(2 * i, i, 1) for i in range(MAX_ENTRY_SEGMENTS + 5)]
    got = entries(segments, 0, 2 * len(segments), 50_000)
    assert [len(e.segments) for e in got] == [MAX_ENTRY_SEGMENTS, 5]
    assert got[1].covered_start == 2 * MAX_ENTRY_SEGMENTS and check_contiguous(got) == []


@pytest.mark.parametrize(
    ("segments", "start", "end", "match"),
    [
        ([seg(0, 0, 5)], 2, 10, "outside"),
        ([seg(8, 0, 5)], 0, 10, "outside"),
        ([seg(0, 0, 0)], 0, 10, "empty"),
        ([seg(3, 0, 1)], 3, 3, "outside"),
        ([seg(5, 10, 2), seg(6, 12, 1)], 0, 10, "out of order"),
        ([seg(5, 10, 2), seg(8, 11, 1)], 0, 10, "out of order"),
        ([], 5, 4, "reversed"),
    ],
    ids=["before-the-range", "past-the-range", "empty-segment", "empty-range",
         "overlapping-source", "overlapping-target", "reversed-range"],
)
def test_adopted_entries_refuse_segments_that_cannot_be_recorded(
    segments: list[Segment], start: int, end: int, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        entries(segments, start, end, 10)


def test_aligned_history_becomes_entries_that_look_up_each_first_copy() -> None:
    # given source offsets 0..9 (a marker at 4), copied with a replay of 2..3
    source = records("abcdefghi", offsets=[0, 1, 2, 3, 5, 6, 7, 8, 9])
    target = records("abcdcdefghi", 40)
    segments = [s for s in align(source, target) if isinstance(s, Segment)]
    # when
    got = entries(segments, 0, 10, 4)
    # then
    found = [lookup(got, offset) for offset in range(10)]
    assert [f[1] if f is not None else "uncovered" for f in found] == [
        40, 41, 42, 43, None, 46, 47, 48, 49, 50]
    assert got[-1].target_end == 51 and check_contiguous(got) == []

"""Checkpoints: MM2's wire format byte for byte, exact translation (G5), MM2's emit rule,
and which group offsets may be written on the target."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ferry.core.checkpoints import (
    Checkpoint,
    TargetGroup,
    Translated,
    decode,
    encode,
    latest,
    offsets_to_commit,
    should_emit,
    translate,
)
from ferry.core.offsetmap import MapEntry, Segment

EXACT, BOUNDED = Translated.EXACT, Translated.BOUNDED


def test_encoding_matches_mm2_bytes_built_by_hand() -> None:
    key, value = encode(Checkpoint("g1", "A.orders", 3, 1000, 998, "meta"))
    assert key == (b"\x00\x02g1" + b"\x00\x08A.orders" + b"\x00\x00\x00\x03")
    assert value == (b"\x00\x00" + (1000).to_bytes(8, "big") + (998).to_bytes(8, "big")
                     + b"\x00\x04meta")


def test_decoding_round_trips_and_empty_metadata_is_an_empty_string() -> None:
    checkpoint = Checkpoint("gröup", "A.t", 0, 0, 0, "")
    assert decode(*encode(checkpoint)) == checkpoint
    assert encode(checkpoint)[1].endswith(b"\x00\x00")


@pytest.mark.parametrize(
    ("key", "value"),
    [(None, b"x"), (b"\x00\x02g1", b""), (b"\x00\x02g1\x00\x01t\x00\x00\x00\x01",
                                           b"\x00\x01" + bytes(16) + b"\x00\x00"),
     (b"\xff\xff", bytes(20))],
    ids=["tombstone", "truncated", "unknown-version", "negative-length"],
)
def test_records_that_do_not_parse_are_skipped(key: bytes | None, value: bytes) -> None:
    assert decode(key, value) is None


def entry(start: int, end: int, *segments: tuple[int, int, int]) -> MapEntry:
    return MapEntry("A->B", "r", 0, "t", 0, "A.t", 0, start, end,
                    tuple(Segment(*s) for s in segments), 0)


# Source offsets 0..9 went to target 0..9; 10 is a commit marker, 11..14 aborted, 15 a
# marker; 16..19 went to target 11..14 (target 10 is Ferry's own commit marker).
ENTRIES = [entry(0, 12, (0, 0, 10)), entry(12, 20, (16, 11, 4))]


@pytest.mark.parametrize(
    ("committed", "expected"),
    [(0, (0, EXACT)), (5, (5, EXACT)), (10, (11, EXACT)), (13, (11, EXACT)),
     (16, (11, EXACT)), (19, (14, EXACT)), (20, (15, EXACT)), (25, (15, BOUNDED))],
    ids=["start", "middle", "marker", "aborted", "after-gap", "last", "at-end",
         "ahead-of-mirror"],
)
def test_translation_is_the_first_mirrored_record_at_or_after_the_commit(
    committed: int, expected: tuple[int, str]
) -> None:
    assert translate(ENTRIES, committed) == expected


def test_a_group_before_where_the_flow_started_maps_to_its_first_record() -> None:
    assert translate([entry(100, 110, (100, 0, 10))], 40) == (0, EXACT)


def test_a_group_past_a_copied_source_marker_translates_past_ferrys_marker_after_it() -> None:
    # source 20 is a marker copied in a transaction of its own: the remote partition ended
    # at 16 then (15 is Ferry's commit marker after target 14)
    marker = replace(entry(20, 21), target_end=16)
    assert translate([*ENTRIES, marker], 21) == (16, EXACT)
    assert translate([marker], 21) == (16, EXACT)  # what a read of the entries after 20 sees


def test_nothing_mirrored_yet_has_no_translation() -> None:
    assert translate([], 5) is None
    assert translate([entry(0, 3)], 1) is None  # only markers covered, remote end unknown


@pytest.mark.parametrize(
    ("committed", "expected"),
    [(0, (7, EXACT)), (3, (7, EXACT)), (9, (7, BOUNDED))],
    ids=["empty-partition-at-0", "past-markers-only", "ahead-of-mirror"],
)
def test_a_partition_without_mirrored_records_translates_to_where_the_remote_one_ends(
    committed: int, expected: tuple[int, str]
) -> None:
    # covered 0..2 (markers only, or 0..0 for an empty partition); the remote one ends at 7
    covered = MapEntry("A->B", "r", 0, "t", 0, "A.t", 0, 0, 3, (), 0, target_end=7)
    assert translate([covered], committed) == expected


@pytest.mark.parametrize(
    ("last", "new", "emit"),
    [(None, (10, 10), True), ((10, 10), (10, 10), False), ((10, 10), (12, 12), True),
     ((10, 10), (12, 10), False), ((10, 10), (5, 5), True), ((10, 10), (11, 9), False)],
    ids=["first", "repeat", "advanced", "upstream-only", "rewind", "downstream-regress"],
)
def test_emit_rule_is_mm2s(last: tuple[int, int] | None, new: tuple[int, int],
                           emit: bool) -> None:
    before = Checkpoint("g", "A.t", 0, *last) if last else None
    assert should_emit(Checkpoint("g", "A.t", 0, *new), before) is emit


def test_latest_keeps_the_last_checkpoint_per_group_partition() -> None:
    found = latest([Checkpoint("g", "A.t", 0, 1, 1), Checkpoint("g", "A.t", 1, 5, 5),
                    Checkpoint("g", "A.t", 0, 3, 3)])
    assert found[("g", "A.t", 0)].upstream_offset == 3 and len(found) == 2


@pytest.mark.parametrize(
    ("state", "offsets", "expected"),
    [("ABSENT", {}, [0, 1]), ("EMPTY", {("A.t", 0): 50, ("A.t", 1): 5}, [1]),
     ("EMPTY", {("A.t", 0): 10}, [1]), ("STABLE", {}, None),
     ("PREPARING_REBALANCE", {}, None)],
    ids=["absent", "empty-forward-only", "empty-equal", "active", "rebalancing"],
)
def test_group_offsets_are_written_only_to_idle_groups_and_only_forward(
    state: str, offsets: dict[tuple[str, int], int], expected: list[int] | None
) -> None:
    checkpoints = [Checkpoint("g", "A.t", 0, 12, 10), Checkpoint("g", "A.t", 1, 9, 9)]
    result = offsets_to_commit(checkpoints, TargetGroup(state, offsets))
    assert (None if result is None else sorted(p for _, p in result)) == expected


@pytest.mark.parametrize(
    ("committed", "expected"),
    [(0, 0), (7, 7), (10, 16), (11, 16), (13, 18), (15, 20), (40, 20)],
    ids=["start", "middle", "own-commit-marker", "after-gap", "inside", "at-end", "beyond"],
)
def test_fail_back_maps_a_remote_offset_to_the_source_record_it_holds(
    committed: int, expected: int
) -> None:
    from ferry.core.checkpoints import translate_back

    assert translate_back(ENTRIES, committed) == (expected, EXACT)
    assert translate_back([], committed) is None

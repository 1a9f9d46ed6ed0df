"""Verification: digests keep what a mirror must keep; pairs come from the offset map;
altered and missing records are told apart."""

from __future__ import annotations

from ferry.core.offsetmap import MapEntry, Segment
from ferry.core.verify import ALTERED, MISSING, Mismatch, compare, digest, pairs


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
    checked, found = compare([(0, 10), (1, 11), (2, 12), (3, 13), (4, 14)], source, target)
    assert checked == 4  # source offset 4 is gone
    assert found == [Mismatch(1, 11, ALTERED), Mismatch(2, 12, MISSING)]

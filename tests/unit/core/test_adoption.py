"""Adopting another mirror's progress: the decisions made from an alignment."""

from __future__ import annotations

import pytest

from ferry.core.adoption import (
    ADOPTED,
    NO_PROGRESS,
    NOT_ALIGNED,
    PARTITIONS_DIFFER,
    AdoptReport,
    PartitionAdoption,
    finding_text,
    moving,
    not_aligned,
    position,
    tail,
)
from ferry.core.alignment import ALTERED, DOUBLED, EXTRA, MISSING, Finding


@pytest.mark.parametrize(("last_paired", "low", "progress", "expected"), [
    (1259, 0, 1200, 1260),  # copied after its last flush: continue after them
    (1199, 0, 1200, 1200),  # a clean stop: where it stopped
    (999, 0, 1200, 1000),  # counted records that are not on the target: copy them again
    (None, 0, 1200, 0),  # nothing on the target: copy everything there is
    (None, 1500, 1000, 1000),  # retention deleted records it never copied: the gap shows
    (None, 1500, NO_PROGRESS, 1500),  # no progress stored, nothing paired
    (None, 1500, 1500, 1500),
])
def test_ferry_continues_one_past_the_last_record_copied(
        last_paired: int | None, low: int, progress: int, expected: int) -> None:
    assert position(last_paired, low, progress) == expected


@pytest.mark.parametrize(("matched", "altered", "source", "target", "trusted"), [
    (1_000_000, 0, 1_000_000, 1_000_020, True),
    (1_000_000, 10_000, 1_010_000, 1_010_000, True),  # a trickle: 1%
    (1_000_000, 10_001, 1_010_001, 1_010_001, False),
    (50, 100, 150, 150, True),  # at least 100 are tolerated
    (50, 101, 151, 151, False),
    (0, 0, 10, 10, False),  # both hold records, none pairs
    (0, 0, 10, 0, True),  # an empty remote partition: nothing to pair
    (0, 0, 0, 10, True),  # an empty source partition
])
def test_an_alignment_that_lost_step_is_not_trusted(
        matched: int, altered: int, source: int, target: int, trusted: bool) -> None:
    assert (not_aligned(matched, altered, source, target) == "") is trusted


def test_the_tail_after_the_last_pair_is_copied_again_or_reported() -> None:
    after = [Finding(ALTERED, 90, 92, 300, 302, 2), Finding(DOUBLED, 80, 85, 302, 307, 5),
             Finding(MISSING, 92, 100, None, None, 8), Finding(EXTRA, None, None, 307, 309, 2)]
    found = tail(after)
    assert (found.to_copy, found.missing, found.altered) == (10, 8, 2)
    assert [f.kind for f in found.shown] == [DOUBLED, EXTRA]


def test_progress_that_moved_between_two_reads_is_named() -> None:
    first = {("orders", 0): 10, ("orders", 1): 5, ("audit", 0): 1}
    second = {("orders", 0): 10, ("orders", 1): 7, ("billing", 0): 3}
    assert moving(first, second) == [("audit", 0), ("billing", 0), ("orders", 1)]
    assert moving(first, dict(first)) == []


def test_a_report_names_what_it_found_and_what_was_not_adopted() -> None:
    part = PartitionAdoption("orders", 0, "A.orders", 1200, position=1260, matched=1260,
                             doubled=20, after_progress=60, to_copy=15, status=ADOPTED,
                             findings=[Finding(DOUBLED, 1180, 1200, 1200, 1220, 20)])
    refused = PartitionAdoption("orders", 1, "A.orders", NO_PROGRESS, status=NOT_ALIGNED,
                                reason="no source record has a copy")
    other = PartitionAdoption("audit", 0, "A.audit", 5, status=PARTITIONS_DIFFER,
                              reason="A.audit has 1 partitions, audit 2")
    report = AdoptReport("A->B", "mm2", True, "adopted-mm2-x", "mm2-offsets.A.internal on B",
                         [part, refused, other])
    text = report.text()
    assert ("  orders-0 -> A.orders-0: adopted; old mirror at 1200, Ferry continues at 1260; "
            "1,260 records paired, 0 missing, 20 doubled, 0 extra, 0 altered; 60 copied "
            "after its last flush; 15 left to copy (0.0s)") in text
    assert "    doubled: 20 records, source 1180..1199, target 1200..1219" in text
    assert "orders-1 -> A.orders-1: not-aligned: no source record has a copy; no progress " \
        "stored" in text
    assert "audit-0 -> A.audit-0: partitions-differ: A.audit has 1 partitions, audit 2\n" in text
    assert text.endswith("2 partitions not adopted (see above): do not run the flow before "
                         "they are settled, or it copies them as new")
    assert report.to_json()["ok"] is False
    assert finding_text(Finding(EXTRA, None, None, 7, 9, 2)) == "extra: 2 records, target 7..8"

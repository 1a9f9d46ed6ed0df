"""Adopting another mirror's progress: the decisions made from an alignment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ferry.core.adoption import (
    NO_PROGRESS,
    AdoptReport,
    AdoptStatus,
    PartitionAdoption,
    any_shared,
    finding_text,
    lost_step,
    moving,
    not_aligned,
    open_transaction,
    partition_check,
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


@pytest.mark.parametrize(("after", "progress", "counted"), [
    # a replay longer than the window: nothing pairs after record 59 though the old mirror
    # counts up to 100 as copied; copying 60-99 again would double them
    ([Finding(ALTERED, 60, 100, 60, 100, 40), Finding(EXTRA, None, None, 100, 130, 30)],
     100, (40, 60)),
    ([Finding(ALTERED, 60, 100, 60, 100, 40)], 70, (10, 60)),  # only those below progress
    # copies of aborted records at the end, then records the old mirror never read
    ([Finding(ALTERED, 100, 103, 100, 103, 3)], 100, (0, None)),
    ([Finding(MISSING, 60, 100, None, None, 40)], 100, (0, None)),  # counted, not on target
    ([Finding(ALTERED, 60, 100, 60, 100, 40)], NO_PROGRESS, (0, None)),
])
def test_records_the_old_mirror_counts_as_copied_must_pair(
        after: list[Finding], progress: int, counted: tuple[int, int | None]) -> None:
    end = tail(after, progress)

    assert (end.counted, end.counted_from) == counted
    assert bool(lost_step(end, 10)) is bool(counted[0])


def test_a_lost_step_names_the_records_and_the_window() -> None:
    end = tail([Finding(ALTERED, 60, 100, 60, 100, 40)], 100)
    assert lost_step(end, 10) == (
        "40 records the old mirror's progress counts as copied (from offset 60) do not pair "
        "with the records after the last paired copy: the alignment lost step (a replay or a "
        "hole longer than --window 10: raise it), or the remote partition holds other records")


@pytest.mark.parametrize(("stable", "end", "unpaired", "waits"), [
    (10, 15, 5, True),  # open, and copies the alignment could not pair: may be of it
    (10, 15, 0, False),  # open, but nothing after the last pair: it copied none of it
    (15, 15, 5, False),  # nothing open: unpaired copies are reported as extra
    (16, 15, 5, False),  # committed since the end was read
])
def test_an_open_transaction_holds_back_a_partition_with_copies_after_the_last_pair(
        stable: int, end: int, unpaired: int, waits: bool) -> None:
    assert bool(open_transaction("t-0", "A.t-0", stable, end, unpaired)) is waits


@pytest.mark.parametrize(("few", "many", "shared"), [
    ([], [b"a"], False),
    ([b"a"], [], False),
    ([b"a", b"b"], [b"c", b"b"], True),
    ([b"a", b"b"], [b"c", b"d"], False),
])
def test_any_shared_tells_whether_a_copy_is_of_an_uncommitted_record(
        few: list[bytes], many: list[bytes], shared: bool) -> None:
    assert any_shared(few, many) is shared


def test_any_shared_reads_the_larger_side_only_up_to_the_first_shared() -> None:
    def endless() -> Iterator[bytes]:
        yield b"x"
        yield b"b"
        raise AssertionError("read past the first shared digest")

    assert any_shared([b"a", b"b"], endless())


def test_copies_after_the_last_pair_are_the_altered_and_extra_ones_not_the_doubles() -> None:
    after = [Finding(ALTERED, 10, 12, 10, 12, 2), Finding(DOUBLED, 5, 8, 12, 15, 3),
             Finding(EXTRA, None, None, 15, 19, 4), Finding(MISSING, 12, 20, None, None, 8)]
    assert tail(after).unpaired_copies == 6


@pytest.mark.parametrize(("partition", "source", "remote", "status"), [
    (0, 2, 2, AdoptStatus.WOULD_ADOPT),
    (1, 2, 2, AdoptStatus.WOULD_ADOPT),
    (0, 2, 1, AdoptStatus.PARTITIONS_DIFFER),  # MM1's producer picked among fewer
    (0, 2, 4, AdoptStatus.PARTITIONS_DIFFER),  # ... or among more: half of 0 is in 2
    (0, 2, None, AdoptStatus.NO_REMOTE),
    (0, None, 2, AdoptStatus.NO_SOURCE),  # deleted since the old mirror stored progress
    (3, 2, 2, AdoptStatus.NO_SOURCE_PARTITION),  # recreated with fewer partitions
])
def test_only_partitions_mirrored_partition_to_partition_are_adopted(
        partition: int, source: int | None, remote: int | None, status: str) -> None:
    found, reason = partition_check(partition, source, remote, "t", "A.t")

    assert found == status
    assert bool(reason) is (status == AdoptStatus.PARTITIONS_DIFFER)


def test_progress_that_moved_between_two_reads_is_named() -> None:
    first = {("orders", 0): 10, ("orders", 1): 5, ("audit", 0): 1}
    second = {("orders", 0): 10, ("orders", 1): 7, ("billing", 0): 3}
    assert moving(first, second) == [("audit", 0), ("billing", 0), ("orders", 1)]
    assert moving(first, dict(first)) == []


def test_a_report_names_what_it_found_and_what_was_not_adopted() -> None:
    part = PartitionAdoption("orders", 0, "A.orders", 1200, position=1260, matched=1260,
                             doubled=20, after_progress=60, to_copy=15, status=AdoptStatus.ADOPTED,
                             findings=[Finding(DOUBLED, 1180, 1200, 1200, 1220, 20)])
    refused = PartitionAdoption("orders", 1, "A.orders", NO_PROGRESS,
                                status=AdoptStatus.NOT_ALIGNED,
                                reason="no source record has a copy")
    other = PartitionAdoption("audit", 0, "A.audit", 5, status=AdoptStatus.PARTITIONS_DIFFER,
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

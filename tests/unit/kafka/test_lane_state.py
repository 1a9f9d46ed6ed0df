"""A lane's per-partition state between transactions (no broker: the bookkeeping only)."""

from __future__ import annotations

import time

from ferry.core.tables import RangeResult
from ferry.kafka.lane_state import Part, Txn


def test_after_an_aborted_transaction_the_next_one_covers_nothing_it_did_not_read() -> None:
    # given: a partition resuming after an accepted retention gap (position 20, records from
    # 50), whose first transaction read offsets 50..70
    part = Part("orders", 0, "A.orders", start=50, end=100, ranges=[], covered=20,
                skip_from=20)
    part.txn = Txn(touched=True, last_offset=70)

    # when: the transaction is aborted
    part.aborted()

    # then: the gap is still to be recorded, and a commit now (before anything is read
    # again) covers the gap and stops at 50; offsets 50..70 are read again, not skipped
    assert part.txn.touched
    assert part.covered_end == 50


def test_an_aborted_transaction_past_the_gap_leaves_nothing_to_record() -> None:
    part = Part("orders", 0, "A.orders", start=50, end=100, ranges=[], covered=60)
    part.txn = Txn(touched=True, last_offset=70)
    part.aborted()
    assert not part.txn.touched
    assert part.covered_end == 60


def test_a_done_partition_covers_its_whole_range() -> None:
    part = Part("orders", 0, "A.orders", start=0, end=10, ranges=[], covered=0)
    part.txn.last_offset, part.done = 7, True  # 8 and 9: a commit marker and an aborted record
    assert part.covered_end == 10


def _read(txn: Txn, sizes: dict[int, int]) -> None:
    """The transaction read these source offsets, of these sizes, in order."""
    for offset, size in sizes.items():
        txn.builder.add(offset)
        txn.sizes.append(size)
        txn.last_offset = offset
    txn.touched = True


def test_a_commit_counts_only_the_records_below_its_end_into_their_ranges() -> None:
    # given: two adjacent ranges, and a transaction that read offsets 8..12 (10 bytes each)
    first, second = RangeResult("orders", 0, 0, 10), RangeResult("orders", 0, 10, 20)
    part = Part("orders", 0, "A.orders", start=0, end=20, ranges=[first, second], covered=8)
    _read(part.txn, {o: 10 for o in range(8, 13)})

    # when: it commits up to 12 (offset 12 was read, but is not covered)
    part.committed(12)

    # then
    assert (first.records, first.bytes) == (2, 20)
    assert (second.records, second.bytes) == (2, 20)
    assert part.covered == 12
    assert (part.txn.sizes, part.txn.touched, part.txn.builder.count) == ([], False, 0)


def test_a_commit_counts_each_records_own_size_across_gaps_in_the_source() -> None:
    # given: compaction and markers left holes; each record has its own size
    first, second = RangeResult("orders", 0, 0, 10), RangeResult("orders", 0, 10, 20)
    part = Part("orders", 0, "A.orders", start=0, end=20, ranges=[first, second], covered=0)
    _read(part.txn, {1: 5, 2: 6, 7: 7, 9: 8, 10: 9, 14: 10, 19: 11})

    # when: the partition is done and the whole range committed
    part.committed(20)

    # then: 1, 2, 7 and 9 in the first range; 10, 14 and 19 in the second
    assert (first.records, first.bytes) == (4, 26)
    assert (second.records, second.bytes) == (3, 30)


def test_a_transactions_bytes_are_those_it_records_after_a_refusal() -> None:
    part = Part("orders", 0, "A.orders", start=0, end=10, ranges=[], covered=0)
    _read(part.txn, {0: 3, 1: 4, 2: 5, 3: 6})
    part.txn.first_target, part.txn.last_target = 0, 3
    assert part.txn.bytes == 18
    part.txn.refuse(2)
    part.keep_before_refusal()
    assert part.txn.bytes == 7


def test_a_ranges_age_is_taken_from_the_first_record_read_in_it() -> None:
    # given: two ranges; the first record of the first one is at 3 (0..2 compacted away)
    first, second = RangeResult("orders", 0, 0, 10), RangeResult("orders", 0, 10, 20)
    part = Part("orders", 0, "A.orders", start=0, end=20, ranges=[first, second])
    now_ms = int(time.time() * 1000)

    # when: records are read as the lane does: `aged` only at or past `age_from`
    for offset, created_ms in [(3, now_ms - 5_000), (4, now_ms - 1), (12, now_ms - 2_000)]:
        if offset >= part.age_from:
            part.aged(offset, (1, created_ms))

    # then: each range's age is its first record's; a record without a time gives none
    assert 5_000 <= first.max_age_ms < 6_000
    assert 2_000 <= second.max_age_ms < 3_000
    assert part.age_from == 20
    empty = Part("orders", 1, "A.orders", start=0, end=5, ranges=[RangeResult("orders", 1, 0, 5)])
    empty.aged(0, (0, -1))
    assert empty.ranges[0].max_age_ms == 0


def test_at_least_once_keeps_only_the_acknowledged_records_before_a_refusal() -> None:
    # given: offsets 0..4 sent at target offsets 100..104; the target refused offset 3
    part = Part("orders", 0, "A.orders", start=0, end=10, ranges=[], covered=0, done=True)
    for offset in range(5):
        part.txn.builder.add(offset)
    part.txn.first_target, part.txn.last_target, part.txn.last_offset = 100, 104, 4
    part.txn.refuse(3)

    # when
    part.keep_before_refusal()

    # then: 0..2 are recorded at 100..102, and the position stops at the refused record
    assert part.txn.builder.count == 3
    assert part.txn.last_target == 102
    assert not part.done
    assert part.covered_end == 3

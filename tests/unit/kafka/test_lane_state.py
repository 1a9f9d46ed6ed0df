"""A lane's per-partition state between transactions (no broker: the bookkeeping only)."""

from __future__ import annotations

from ferry.kafka.lane import _Part, position_metadata


def test_after_an_aborted_transaction_the_next_one_covers_nothing_it_did_not_read() -> None:
    # given: a partition resuming after an accepted retention gap (position 20, records from
    # 50), whose first transaction read offsets 50..70 and was aborted
    part = _Part("orders", 0, "A.orders", start=50, end=100, ranges=[], covered=20,
                 skip_from=20)
    part.touched, part.last_offset = True, 70

    # when: the abort forgets the transaction (the gap is still to be recorded)
    part.reset_txn()
    part.touched = True

    # then: a commit now (before anything is read again) covers the gap and stops at 50;
    # offsets 50..70 are read again, not skipped
    assert part.covered_end == 50


def test_a_done_partition_covers_its_whole_range() -> None:
    part = _Part("orders", 0, "A.orders", start=0, end=10, ranges=[], covered=0)
    part.last_offset, part.done = 7, True  # 8 and 9: a commit marker and an aborted record
    assert part.covered_end == 10


def test_position_metadata_names_the_owner_and_source_incarnation() -> None:
    assert position_metadata(None) == ""
    assert position_metadata(5, "ferry.A->B.lane-0-of-2", "id-1") == (
        '{"ferry_target_end": 5, "ferry_owner": "ferry.A->B.lane-0-of-2", '
        '"ferry_source_id": "id-1"}')

"""`ferry verify`: each mirrored record compared, by digest, with the record the offset map
says it became; what is altered, missing, never mirrored or extra is named, and every
partition's result is recorded."""

from __future__ import annotations

import pytest

from ferry.config import Config
from ferry.core.tables import StatePaths
from ferry.errors import UsageError
from ferry.state.reader import rows
from ferry.steps.verify import verify
from tests.unit.steps.fakes import FakeCluster, FakeOffsetMaps, entry

SAME = {o: f"d{o}".encode() for o in range(6)}
"""Source offset -> digest of the source records 0..5."""


def mirrored(source_digests: dict[int, bytes], at: int = 100) -> dict[int, bytes]:
    """The target records of source 0..4 written at `at`.. (offset 5 not mirrored)."""
    return {at + o: d for o, d in source_digests.items() if o < 5}


@pytest.mark.parametrize(
    ("low", "target", "checked", "mismatches", "skipped", "extra"),
    [
        (0, mirrored(SAME), 5, [], [(5, 6)], 0),
        (0, {**mirrored(SAME), 102: b"other"}, 5, [(2, 102, "altered")], [(5, 6)], 0),
        (0, {k: v for k, v in mirrored(SAME).items() if k != 103}, 5,
         [(3, 103, "missing")], [(5, 6)], 0),
        (0, {**mirrored(SAME), 104: b"d4", 99: b"x"}, 5, [], [(5, 6)], 0),
        (2, mirrored(SAME), 3, [], [(5, 6)], 0),
    ],
    ids=["equal", "altered", "missing", "records-outside-the-mapped-range-are-not-read",
         "records-the-source-deleted-are-not-checked"],
)
def test_each_mirrored_record_is_compared_with_the_one_the_offset_map_names(
    config: Config, low: int, target: dict[int, bytes], checked: int,
    mismatches: list[tuple[int, int, str]], skipped: list[tuple[int, int]], extra: int
) -> None:
    # given: source orders-0 holds offsets low..5; the map covers 0..5, records 0..4 at 100..
    flow = config.enabled_flows[0]
    source = FakeCluster("A").topic("orders", 6, start=low)
    source.digested[("orders", 0)] = {o: d for o, d in SAME.items() if o >= low}
    at_target = FakeCluster("B")
    at_target.digested[("A.orders", 0)] = target
    claims = FakeOffsetMaps([entry("orders", 0, (0, 6), [(0, 100, 5)])])

    # when
    (check,) = verify(flow, source=source, target=at_target,
                      claims=lambda f: claims(f, {"orders"}))

    # then
    assert (check.source_start, check.source_end) == (low, 6)
    assert check.checked == checked
    assert [(m.source_offset, m.target_offset, m.kind) for m in check.mismatches] == mismatches
    assert [(s.start, s.end) for s in check.skipped] == skipped
    assert check.extra == extra
    assert check.ok is (not mismatches and not skipped)


def test_a_target_record_the_map_does_not_name_is_reported_as_extra_not_as_a_failure(
    config: Config
) -> None:
    flow = config.enabled_flows[0]
    source = FakeCluster("A").topic("orders", 2)
    source.digested[("orders", 0)] = {0: b"a", 1: b"b"}
    at_target = FakeCluster("B")
    # the map says 0 -> 10 and 1 -> 12: offset 11 between them is a record nobody mapped
    at_target.digested[("A.orders", 0)] = {10: b"a", 11: b"dup", 12: b"b"}
    claims = FakeOffsetMaps([entry("orders", 0, (0, 1), [(0, 10, 1)]),
                             entry("orders", 0, (1, 2), [(1, 12, 1)])])

    (check,) = verify(flow, source=source, target=at_target,
                      claims=lambda f: claims(f, {"orders"}))

    assert (check.checked, check.mismatches, check.extra) == (2, [], 1)
    assert check.ok  # every source record is there, unaltered: a duplicate is reported
    assert "(1 extra target records)" in check.text(flow)


@pytest.mark.parametrize(("stray", "extra"), [({}, 0), ({104: b"dup"}, 1)],
                         ids=["every-record-paired", "a-record-nobody-mapped-between"])
def test_a_map_whose_later_range_was_written_first_is_still_checked_record_by_record(
    config: Config, stray: dict[int, bytes], extra: int
) -> None:
    # given: source 3..5 went to the remote topic (100..102) before source 0..2 (110..112),
    # as a refill of a recreated remote topic writes an earlier range after a later one
    flow = config.enabled_flows[0]
    source = FakeCluster("A").topic("orders", 6)
    source.digested[("orders", 0)] = dict(SAME)
    at_target = FakeCluster("B")
    at_target.digested[("A.orders", 0)] = {
        **{110 + o: SAME[o] for o in range(3)}, 100: SAME[3], 101: b"other", **stray}
    claims = FakeOffsetMaps([entry("orders", 0, (0, 3), [(0, 110, 3)]),
                             entry("orders", 0, (3, 6), [(3, 100, 3)])])

    (check,) = verify(flow, source=source, target=at_target,
                      claims=lambda f: claims(f, {"orders"}))

    assert check.checked == 6
    assert [(m.source_offset, m.target_offset, m.kind) for m in check.mismatches] == [
        (4, 101, "altered"), (5, 102, "missing")]
    assert (check.skipped, check.extra) == ([], extra)


def test_every_partition_is_checked_and_recorded_once(config: Config) -> None:
    flow = config.enabled_flows[0]
    source = FakeCluster("A").topic("orders", 1, 1)
    source.digested = {("orders", 0): {0: b"a"}, ("orders", 1): {0: b"b"}}
    at_target = FakeCluster("B")
    at_target.digested = {("A.orders", 0): {0: b"a"}, ("A.orders", 1): {0: b"B"}}
    claims = FakeOffsetMaps([entry("orders", 0, (0, 1), [(0, 0, 1)]),
                             entry("orders", 1, (0, 1), [(0, 0, 1)])])

    checks = verify(flow, run_id="v1", source=source, target=at_target,
                    claims=lambda f: claims(f, {"orders"}))

    assert [(c.partition, c.ok) for c in checks] == [(0, True), (1, False)]
    recorded = rows(StatePaths(flow.ferry.state_dir).verify, flow.name)
    assert sorted((r["run_id"], r["partition"], r["altered"], r["outcome"])
                  for r in recorded) == [("v1", 0, 0, "ok"), ("v1", 1, 1, "mismatch")]


def test_a_topic_the_flow_never_mirrored_is_a_usage_error(config: Config) -> None:
    flow = config.enabled_flows[0]
    claims = FakeOffsetMaps([entry("orders", 0, (0, 1), [(0, 0, 1)])])
    with pytest.raises(UsageError, match="has mirrored nothing of a topic 'payments'"):
        verify(flow, "payments", source=FakeCluster("A").topic("orders", 1),
               target=FakeCluster("B"), claims=lambda f: claims(f, {"orders"}))



def test_runs_of_bad_records_are_named_as_ranges_counted_and_recorded(
    config: Config
) -> None:
    # given: of source 0..9, the map pairs 0..7 with 100..107; 0..2 and 5 are gone from the
    # target, 6 is altered, and 8..9 were never mirrored
    flow = config.enabled_flows[0]
    digests = {o: f"d{o}".encode() for o in range(10)}
    source = FakeCluster("A").topic("orders", 10)
    source.digested[("orders", 0)] = digests
    at_target = FakeCluster("B")
    at_target.digested[("A.orders", 0)] = {103: digests[3], 104: digests[4], 106: b"x",
                                           107: digests[7]}
    claims = FakeOffsetMaps([entry("orders", 0, (0, 10), [(0, 100, 8)])])

    (check,) = verify(flow, run_id="v2", source=source, target=at_target,
                      claims=lambda f: claims(f, {"orders"}))

    assert check.text(flow) == (
        "MISMATCH orders-0 [0, 10): missing orders-0@0..2 -> A.orders-0@100..102; "
        "missing orders-0@5 -> A.orders-0@105; altered orders-0@6 -> A.orders-0@106; "
        "skipped orders-0@8..9 (not on the target) (1 altered, 4 missing, 2 skipped)")
    printed = check.to_json()
    assert (printed["altered"], printed["missing"], printed["skipped_records"]) == (1, 4, 2)
    assert printed["mismatches"][0] == {"source_offset": 0, "target_offset": 100,
                                        "kind": "missing", "records": 3}
    assert printed["skipped"] == [{"start": 8, "end": 10}]
    (row,) = [r for r in rows(StatePaths(flow.ferry.state_dir).verify, flow.name)
              if r["run_id"] == "v2"]
    assert (row["altered"], row["missing"], row["skipped"], row["outcome"]) == (
        1, 4, 2, "mismatch")

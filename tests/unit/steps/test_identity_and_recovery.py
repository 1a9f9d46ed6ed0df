"""Durable positions (G9) and topic identity (G10), as pure decisions."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.config import Flow, load_config
from ferry.core.offsetmap import MapEntry, Segment
from ferry.core.planner import TopicPartition
from ferry.core.positions import decode_position, encode_position
from ferry.steps.plan import SourceRecreatedError, check_identity, stale_positions
from ferry.steps.recovery import Recorded, latest_positions

T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


@pytest.fixture
def flow(tmp_path: Path) -> Flow:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = "
                    "b:9092\nA->B.enabled = true\n")
    return load_config(path).flow("A->B")


def entry(partition: int, start: int, end: int, segments: list[tuple[int, int, int]],
          target: str = "A.orders", run: str = "r") -> MapEntry:
    return MapEntry("A->B", run, 0, "orders", partition, target, partition, start, end,
                    tuple(Segment(*s) for s in segments), 0)


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([], {}),
        ([(0, entry(0, 0, 100, [(0, 0, 100)], run="r1"))], {T0: Recorded(100, 100, "r1")}),
        ([(0, entry(0, 0, 100, [(0, 0, 100)])), (5, entry(0, 100, 130, [], run="idle"))],
         {T0: Recorded(130, 100, "idle")}),
        ([(0, entry(0, 0, 100, [(0, 0, 100)])),
          (7, entry(0, 0, 40, [(0, 101, 40)], run="reset"))],
         {T0: Recorded(40, 141, "reset")}),
        ([(0, entry(0, 0, 100, [(0, 0, 100)], target="investigation.orders"))], {}),
        ([(0, entry(0, 0, 10, [(0, 0, 10)], run="a")), (1, entry(1, 0, 3, [], run="b"))],
         {T0: Recorded(10, 10, "a"), T1: Recorded(3, None, "b")}),
    ],
    ids=["nothing-mirrored", "one-entry", "an-idle-entry-after-records",
         "the-latest-written-wins-after-a-reset", "a-backfill-topic-moves-no-position",
         "each-partition-its-own"],
)
def test_the_offset_map_gives_each_partition_the_position_its_latest_entry_left(
    flow: Flow, entries: list[tuple[int, MapEntry]], expected: dict[TopicPartition, Recorded]
) -> None:
    assert latest_positions(flow, entries) == expected


@pytest.mark.parametrize(
    ("found", "remote_ids", "created", "stale"),
    [
        ({T0: (20, encode_position(20, target_id="t1"))}, {"A.orders": "t1"}, set(), set()),
        ({T0: (20, encode_position(20, target_id="t1")), T1: None}, {"A.orders": "t2"}, set(),
         {T0}),
        ({T0: (20, encode_position(20))}, {"A.orders": "t2"}, set(), set()),
        ({T0: (20, encode_position(20, target_id="t1"))}, {}, set(), set()),
        ({T0: (20, encode_position(20)), T1: (3, "")}, {}, {"A.orders"}, {T0, T1}),
        ({T0: None}, {}, {"A.orders"}, set()),
    ],
    ids=["same-remote-topic", "remote-recreated", "older-position-without-id",
         "remote-topic-gone", "the-sync-creates-it-again", "no-position"],
)
def test_positions_of_an_earlier_incarnation_of_the_remote_topic_are_stale(
    flow: Flow, found: dict[TopicPartition, tuple[int, str] | None],
    remote_ids: dict[str, str], created: set[str], stale: set[TopicPartition]
) -> None:
    assert set(stale_positions(flow, found, remote_ids, created)) == stale


def test_positions_carry_the_source_topic_id_they_count_offsets_of() -> None:
    metadata = encode_position(12, "ferry.A->B.lane-0-of-1", "Xy-1")
    assert decode_position(metadata).source_id == "Xy-1"
    assert decode_position("").source_id == "" and decode_position("not json").source_id == ""


@pytest.mark.parametrize(
    ("ids", "recorded", "refused"),
    [
        ({"orders": "id-1"}, {T0: "id-1", T1: "id-1"}, False),
        ({"orders": "id-2"}, {T0: "id-1"}, True),
        ({"orders": "id-2"}, {T0: ""}, False),  # committed before IDs were recorded
        ({}, {T0: "id-1"}, False),  # the topic is gone: the sync step reports that
    ],
    ids=["same-topic", "recreated", "no-recorded-id", "topic-gone"],
)
def test_a_position_of_another_incarnation_of_the_source_topic_is_an_incident(
    flow: Flow, ids: dict[str, str], recorded: dict[TopicPartition, str], refused: bool
) -> None:
    if not refused:
        check_identity(flow, ids, recorded)
        return
    with pytest.raises(SourceRecreatedError) as err:
        check_identity(flow, ids, recorded)
    text = str(err.value)
    assert "orders was deleted and created again" in text and "id-1 became id-2" in text
    assert "ferry positions reset" in text and "Nothing was copied" in text


def test_recovered_positions_are_committed_back_as_the_lanes_commit_them(flow: Flow) -> None:
    # given: positions the offset map recorded for two partitions whose group offsets expired
    from ferry.core.internal import transactional_id
    from ferry.core.lanes import writer_of
    from ferry.steps.recovery import restore
    from tests.unit.steps.fakes import FakeCluster

    target = FakeCluster("B")
    recovered = {T1: Recorded(40, 77, "r2", "id-1"), T0: Recorded(12, None, "r1", "id-1")}

    # when
    restore(flow, recovered, target=target)

    # then: each partition written under its writer id, only where no position appeared
    # meanwhile, in partition order, with the remote partition's end and the source topic
    # ID as its metadata (a recreated source is then still noticed)
    assert [(w.partition, w.position, w.target_end, w.source_id, w.expect)
            for w in target.positions_written] == [(0, 12, None, "id-1", None),
                                                   (1, 40, 77, "id-1", None)]
    group = target.groups["__ferry-positions.A"]
    assert [decode_position(group[("A.orders", p)][1]).source_id for p in (0, 1)] == ["id-1"] * 2
    assert decode_position(group[("A.orders", 1)][1]).owner == transactional_id(
        flow, writer_of("orders", 1, flow.ferry.writers))


def test_a_position_a_run_committed_meanwhile_is_not_restored_over(flow: Flow) -> None:
    from ferry.steps.recovery import restore
    from tests.unit.steps.fakes import FakeCluster

    target = FakeCluster("B")
    target.groups["__ferry-positions.A"] = {("A.orders", 0): (15, "")}

    restore(flow, {T0: Recorded(12, None, "r1", "id-1")}, target=target)

    assert target.groups["__ferry-positions.A"][("A.orders", 0)] == (15, "")
    assert target.positions_written == []


def test_nothing_recovered_commits_nothing(flow: Flow) -> None:
    from ferry.steps.recovery import restore
    from tests.unit.steps.fakes import FakeCluster

    target = FakeCluster("B")
    restore(flow, {}, target=target)
    assert target.altered == [] and target.positions_written == []

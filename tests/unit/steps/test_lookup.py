"""Where a source record went: the offset map as Delta holds it, completed from the
offset-map topic where Delta has not caught up, of the current topic incarnations only."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from ferry.config import Config
from ferry.core.offsetmap import MapCursor, MapEntry
from ferry.core.tables import OFFSET_MAP_DDL, StatePaths, offset_map_row
from ferry.errors import TransientError
from ferry.state.writer import arrow_schema
from ferry.steps.lookup import find, partition_entries
from tests.unit.steps.fakes import FakeCluster, entry

MAP_TOPIC = "ferry-offset-map.A.internal"


SEGMENTS = "segments array<struct<source_start:bigint,target_start:bigint,count:bigint>>, "


def offset_map_schema() -> pa.Schema:
    """The offset map's columns (the copy job writes it with Spark; here delta-rs does)."""
    assert SEGMENTS in OFFSET_MAP_DDL
    schema = arrow_schema(OFFSET_MAP_DDL.replace(SEGMENTS, ""))
    segment = pa.struct([(name, pa.int64()) for name in
                         ("source_start", "target_start", "count")])
    return schema.insert(schema.get_field_index("records") + 1,
                         pa.field("segments", pa.list_(segment)))


def in_delta(state_dir: Path, *rows: tuple[int, MapEntry, str]) -> None:
    """Offset-map rows Delta holds: (offset in the offset-map topic, entry, its topic ID)."""
    table = pa.Table.from_pylist(
        [offset_map_row(e, MAP_TOPIC, offset, map_id) for offset, e, map_id in rows],
        schema=offset_map_schema())
    write_deltalake(StatePaths(str(state_dir)).offset_map, table, mode="append",
                    partition_by=["flow"])


def target_with(*committed: tuple[int, MapEntry], after: int = 0) -> FakeCluster:
    """The target: the offset-map topic (ID map-id; Delta holds it up to `after`) with the
    `committed` entries, and A.orders' current ID."""
    return FakeCluster("B", cursor=MapCursor("map-id", after, False),
                       map_topic=list(committed), ids={"A.orders": "t1"})


SOURCE = FakeCluster("A", ids={"orders": "s1"})
# source offset 5 is a transaction marker: 0-4 went to 0-4, 6-9 to 5-8
FIRST = entry("orders", 0, (0, 10), [(0, 0, 5), (6, 5, 4)], run="r1")
SECOND = entry("orders", 0, (10, 20), [(10, 9, 10)], run="r2")


@pytest.mark.parametrize(
    ("offset", "status", "target", "extra"),
    [
        (7, "mirrored", 6, {"run_id": "r1"}),
        (15, "mirrored", 14, {"run_id": "r2"}),
        (5, "no-record", None, {"next_source": 6, "next_target": 5}),
        (25, "not-mirrored", None, {"mirrored_up_to": 20}),
    ],
    ids=["from-delta", "from-the-topic-where-delta-has-not-caught-up",
         "a-marker-points-to-the-next-mirrored-record", "past-the-mirror"],
)
def test_a_source_offset_is_answered_from_delta_completed_from_the_offset_map_topic(
    config: Config, state_dir: Path, offset: int, status: str, target: int | None,
    extra: dict[str, object]
) -> None:
    # given: Delta holds the first entry; the second is only on the offset-map topic
    in_delta(state_dir, (0, FIRST, "map-id"))
    cluster = target_with((0, FIRST), (1, SECOND))
    # when
    answer = find(config.flow("A->B"), "orders", 0, offset, source=SOURCE, target=cluster)
    # then
    assert (answer.status, answer.target_topic, answer.target_offset) == (
        status, "A.orders", target)
    assert {k: getattr(answer, k) for k in extra} == extra


def test_nothing_mirrored_of_a_partition_says_so(config: Config) -> None:
    answer = find(config.flow("A->B"), "orders", 3, 0, source=SOURCE, target=target_with())

    assert (answer.status, answer.mirrored_up_to) == ("not-mirrored", None)
    assert "nothing of this partition is mirrored yet" in answer.text()


def test_the_entry_written_later_wins_where_entries_overlap(
    config: Config, state_dir: Path
) -> None:
    # a positions reset copied offsets 0-9 again, to 100-109
    in_delta(state_dir, (0, entry("orders", 0, (0, 10), [(0, 0, 10)]), "map-id"))
    again = entry("orders", 0, (0, 10), [(0, 100, 10)], run="reset")

    answer = find(config.flow("A->B"), "orders", 0, 4, source=SOURCE,
                  target=target_with((3, again)))

    assert (answer.target_offset, answer.run_id) == (104, "reset")


def test_rows_of_an_earlier_offset_map_topic_come_before_those_of_the_current_one(
    config: Config, state_dir: Path
) -> None:
    # the offset-map topic was recreated: its old rows have higher offsets, yet are older
    old = entry("orders", 0, (0, 10), [(0, 0, 10)], run="old", committed_at_ms=1_000)
    new = entry("orders", 0, (0, 10), [(0, 200, 10)], run="new", committed_at_ms=2_000)
    in_delta(state_dir, (50, old, "old-map-id"), (0, new, "map-id"))

    answer = find(config.flow("A->B"), "orders", 0, 3, source=SOURCE, target=target_with())

    assert (answer.target_offset, answer.run_id) == (203, "new")


@pytest.mark.parametrize(
    ("source_id", "target_id", "claims", "kept"),
    [("s1", "t1", False, True), ("", "", False, True), ("s0", "t1", False, False),
     ("s1", "t0", False, False), ("s1", "t0", True, True), ("s0", "t1", True, False)],
    ids=["current-topics", "entries-of-an-older-ferry-carry-no-ids",
         "source-topic-recreated-since", "remote-topic-recreated-since",
         "a-verify-claims-what-a-recreated-remote-topic-lost",
         "a-recreated-source-is-never-claimed"],
)
def test_only_entries_of_the_current_topic_incarnations_count(
    config: Config, source_id: str, target_id: str, claims: bool, kept: bool
) -> None:
    written = entry("orders", 0, (0, 10), [(0, 0, 10)], source_id=source_id,
                    target_id=target_id)

    found = partition_entries(config.flow("A->B"), ["orders"], claims=claims, source=SOURCE,
                              target=target_with((1, written)))

    assert found == ({("orders", 0): [written]} if kept else {})


class Unreachable:
    def topic_ids(self, names: Iterable[str]) -> dict[str, str]:
        raise TransientError("cluster A: describing topics: no answer in 30s")


def test_without_the_source_cluster_the_source_ids_are_not_checked(
    config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    written = entry("orders", 0, (0, 10), [(0, 0, 10)], source_id="s0")

    found = partition_entries(config.flow("A->B"), ["orders"], source=Unreachable(),
                              target=target_with((1, written)))

    assert found == {("orders", 0): [written]}
    assert "source topic IDs not checked" in caplog.text


def test_positions_are_never_restored_from_entries_whose_source_ids_could_not_be_read(
    config: Config
) -> None:
    # an entry of a deleted source incarnation taken for the current one would restore its
    # position over the new topic, whose first records would then never be copied
    from ferry.core.planner import TopicPartition
    from ferry.steps.recovery import recorded_positions

    written = entry("orders", 0, (0, 10), [(0, 0, 10)], source_id="s0")

    with pytest.raises(TransientError, match="describing topics"):
        recorded_positions(config.flow("A->B"), [TopicPartition("orders", 0)],
                           source=Unreachable(), target=target_with((1, written)))


def test_a_backfill_into_a_topic_of_its_own_answers_only_for_that_topic(
    config: Config
) -> None:
    mirror = entry("orders", 0, (0, 10), [(0, 0, 10)])
    backfill = entry("orders", 0, (0, 10), [(0, 0, 10)], target="investigation.orders",
                     run="backfill")
    target = target_with((1, mirror), (2, backfill))
    flow = config.flow("A->B")

    assert partition_entries(flow, ["orders"], source=SOURCE, target=target) == {
        ("orders", 0): [mirror]}
    assert partition_entries(flow, ["orders"], into=lambda t: f"investigation.{t}",
                             source=SOURCE, target=target) == {("orders", 0): [backfill]}


def test_only_the_topics_asked_for_are_read(config: Config) -> None:
    orders = entry("orders", 0, (0, 10), [(0, 0, 10)])
    payments = entry("payments", 0, (0, 5), [(0, 0, 5)])

    found = partition_entries(config.flow("A->B"), ["payments"], source=SOURCE,
                              target=target_with((1, orders), (2, payments)))

    assert found == {("payments", 0): [payments]}


def transactions(count: int) -> list[tuple[int, MapEntry, str]]:
    """`count` transactions of 5 records of partition 0, in Delta at offsets 0.. of the
    offset-map topic (Ferry's commit marker after each on the target)."""
    return [(n, entry("orders", 0, (n * 5, n * 5 + 5), [(n * 5, n * 6, 5)]), "map-id")
            for n in range(count)]


def test_a_look_up_reads_only_the_rows_ending_after_its_offset_and_answers_as_a_full_read(
    config: Config, state_dir: Path
) -> None:
    from ferry.core.offsetmap import covering
    from ferry.state.store import DeltaStore

    # given: 60 transactions of partition 0 in Delta (a marker after each), a re-copy of
    # 100-130 written after them, and partition 1's
    flow = config.flow("A->B")
    mirrored = transactions(60)
    again = (60, entry("orders", 0, (100, 130), [(100, 1000, 30)], run="again"), "map-id")
    other = (61, entry("orders", 1, (0, 500), [(0, 0, 500)]), "map-id")
    in_delta(state_dir, *mirrored, again, other)
    full = partition_entries(flow, ["orders"], source=SOURCE, target=target_with(after=61))[
        ("orders", 0)]
    read: list[int] = []

    class Counted(DeltaStore):
        def map_rows(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            found = super().map_rows(*args, **kwargs)
            read.append(len(found))
            return found

    store = Counted.of(flow)
    for offset in range(0, 310, 7):
        read.clear()
        # when
        answer = find(flow, "orders", 0, offset, source=SOURCE, target=target_with(after=61),
                      state=store)
        # then: the answer of a read of every row, from the rows ending after the offset
        hit = covering(full, offset)
        assert answer.target_offset == (hit[1] if hit else None), offset
        assert answer.mirrored_up_to == (None if hit else 300), offset
        assert read == [max(1, 60 - offset // 5 + (1 if offset < 130 else 0))], offset


def test_a_translation_reads_only_what_ends_after_the_committed_offset_and_answers_as_a_full_read(
    config: Config, state_dir: Path
) -> None:
    from ferry.core.checkpoints import translate
    from ferry.core.offsetmap import MapWindow

    # given: 40 transactions of partition 0, a re-copy of 50-80 written after them, an
    # entry covering only a source transaction marker at the end, and partition 1's
    flow = config.flow("A->B")
    rows = [*transactions(40),
            (40, entry("orders", 0, (50, 80), [(50, 500, 30)], run="again"), "map-id"),
            (41, entry("orders", 0, (200, 201), [], target_end=531), "map-id"),
            (42, entry("orders", 1, (0, 500), [(0, 0, 500)]), "map-id")]
    in_delta(state_dir, *rows)
    target = target_with(after=42)
    full = partition_entries(flow, ["orders"], source=SOURCE, target=target)[("orders", 0)]
    for committed in range(0, 210, 3):
        # when: the entries a translation at `committed` reads
        read = partition_entries(flow, ["orders"], source=SOURCE, target=target,
                                 windows=[MapWindow("orders", 0, committed)])
        # then: only partition 0's, none ending at or before the offset (past them all:
        # those ending last), and the translation a read of every entry gives
        assert set(read) == {("orders", 0)}
        assert all(e.covered_end > min(committed, 200) for e in read[("orders", 0)])
        assert translate(read[("orders", 0)], committed) == translate(full, committed), \
            committed


def test_past_everything_of_a_recreated_topic_a_look_up_says_where_its_mirror_ends(
    config: Config, state_dir: Path
) -> None:
    from ferry.core.checkpoints import translate
    from ferry.core.offsetmap import MapWindow

    # given: the source topic's earlier incarnation was mirrored up to 500, the current
    # one (ID s1) up to 100
    flow = config.flow("A->B")
    earlier = entry("orders", 0, (0, 500), [(0, 0, 500)], source_id="s0")
    current = entry("orders", 0, (0, 100), [(0, 600, 100)], source_id="s1", run="r2")
    in_delta(state_dir, (0, earlier, "map-id"), (1, current, "map-id"))
    target = target_with(after=1)

    # when: a look-up and a translation past the current incarnation's end, before the
    # earlier one's
    answer = find(flow, "orders", 0, 200, source=SOURCE, target=target)
    read = partition_entries(flow, ["orders"], source=SOURCE, target=target,
                             windows=[MapWindow("orders", 0, 200)])[("orders", 0)]

    # then: both answer from the current incarnation's last entry, as a full read does
    assert (answer.status, answer.mirrored_up_to) == ("not-mirrored", 100)
    assert translate(read, 200) == translate(
        partition_entries(flow, ["orders"], source=SOURCE, target=target)[("orders", 0)], 200)
    assert read == [current]

"""A cycle's plan (`prepare`) and a backfill's (`prepare_backfill`) against in-memory
clusters: what each reads, what it changes on the target, and what it refuses. Exactness of
the copies that follow: `tests/integration/test_lane.py` and `test_exactness.py`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ferry.config import Config, Flow
from ferry.core import plan_file
from ferry.core.internal import positions_group
from ferry.core.planner import Range, TopicPartition, Watermarks
from ferry.core.positions import encode_position
from ferry.core.tables import StatePaths
from ferry.errors import TerminalError, UsageError
from ferry.state.reader import rows
from ferry.steps.backfill import BackfillRequest, prepare_backfill
from ferry.steps.plan import SourceRecreatedError, UnmappedRecordsError, prepare
from tests.unit.steps.conftest import ConfigWith
from tests.unit.steps.fakes import FakeCluster, entry

MAP_TOPIC = "ferry-offset-map.A.internal"
GROUP = "__ferry-positions.A"


@pytest.fixture
def flow(config: Config) -> Flow:
    assert positions_group(config.flow("A->B")) == GROUP
    return config.flow("A->B")


def source() -> FakeCluster:
    """orders: partition 0 holds offsets 0-4, partition 1 nothing, partition 2 0-6."""
    return FakeCluster("A", ids={"orders": "s1"}).topic("orders", 5, 0, 7)


def mirrored_target() -> FakeCluster:
    """A.orders exists (3 partitions, ID t1) with the offset-map topic."""
    return FakeCluster("B", ids={"A.orders": "t1"}).topic("A.orders", 0, 0, 0) \
        .topic(MAP_TOPIC, 0)


def committed(target: FakeCluster, partition: int, offset: int, source_id: str = "s1"
              ) -> None:
    target.groups.setdefault(GROUP, {})[("A.orders", partition)] = (
        offset, encode_position(offset, "ferry.A->B.lane-0-of-1", source_id))


def spans(ranges: Iterable[Range]) -> list[tuple[str, int, int, int]]:
    return [(r.topic, r.partition, r.start, r.end) for r in ranges]


# -- a cycle's plan --------------------------------------------------------------------------

def test_a_first_cycle_creates_the_remote_topics_then_plans_every_partition_from_its_start(
    flow: Flow
) -> None:
    target = FakeCluster("B", ids={"A.orders": "t1"})

    prepared = prepare(flow, run_id="r1", master="local[2]", source=source(), target=target)

    assert target.created == ["A.orders", MAP_TOPIC]
    assert spans(prepared.plan.copies) == [("orders", 0, 0, 5), ("orders", 2, 0, 7)]
    assert {(r.source_id, r.target_id) for r in prepared.plan.copies} == {("s1", "t1")}
    assert set(prepared.positions.values()) == {None}
    assert (prepared.lanes, prepared.run_id) == (2, "r1")


def test_a_dry_run_plans_as_after_the_sync_and_changes_nothing(flow: Flow) -> None:
    target = FakeCluster("B")

    prepared = prepare(flow, apply=False, master="local[1]", source=source(), target=target)

    assert target.created == [] and target.altered == []
    assert [c.name for c in prepared.topology.create] == ["A.orders"]
    assert spans(prepared.plan.copies) == [("orders", 0, 0, 5), ("orders", 2, 0, 7)]


def test_a_cycle_continues_from_the_positions_committed_on_the_target(flow: Flow) -> None:
    target = mirrored_target()
    committed(target, 0, 3)
    committed(target, 2, 7)

    prepared = prepare(flow, master="local[1]", source=source(), target=target)

    assert spans(prepared.plan.copies) == [("orders", 0, 3, 5)]
    assert prepared.positions[prepared.plan.copies[0].tp] == 3
    assert target.created == []


# orders: partition 0 ends at 5, 1 at 0, 2 at 7 (`source()`)
@pytest.mark.parametrize(("positions", "starts_read"), [
    ({0: 5, 1: 0, 2: 7}, []),
    ({0: 3, 1: 0, 2: 7}, [0]),
    ({0: 5, 2: 7}, [1]),  # a new partition: its start marker
    ({0: 6, 1: 0, 2: 7}, [0]),  # past the end: refused below
], ids=["every-position-at-its-end", "one-behind", "one-without-a-position",
        "one-past-its-end"])
def test_a_plan_reads_log_starts_only_where_a_position_is_not_at_its_end(
    flow: Flow, positions: dict[int, int], starts_read: list[int]
) -> None:
    # an idle cycle of a flow of 10,000 partitions read them all every second; both sides'
    # topic IDs are read once a cycle, idle or not (a topic created again is noticed even
    # where the source looks idle), in one describe each
    source_cluster, target = source(), mirrored_target()
    for partition, offset in positions.items():
        committed(target, partition, offset)

    try:
        prepared = prepare(flow, master="local[1]", source=source_cluster, target=target)
    except TerminalError as exc:
        assert "ends at offset 5" in str(exc)
    else:
        assert prepared.plan.is_idle == (starts_read == [])
        partitions = prepared.details()["partitions"]
        assert [(p["partition"], p["end"]) for p in partitions] == [(0, 5), (1, 0), (2, 7)]
        assert [p["partition"] for p in partitions if p["low"] is not None] == starts_read

    assert source_cluster.starts_read == [TopicPartition("orders", p) for p in starts_read]
    assert source_cluster.ids_read == ["orders"]
    assert target.ids_read == ["A.orders"]


@pytest.mark.parametrize(("positions", "idle_identity", "ids_read"), [
    ({0: 5, 1: 0, 2: 7}, True, ["orders"]),
    ({0: 5, 1: 0, 2: 7}, False, []),  # a loop between its topic syncs: nothing to check
    ({0: 3, 1: 0, 2: 7}, False, ["orders"]),  # something to copy: checked every cycle
], ids=["idle-identity-checked", "idle-identity-left-to-the-topic-sync", "one-behind"])
def test_a_loop_checks_idle_partitions_topic_identity_only_when_asked(
    flow: Flow, positions: dict[int, int], idle_identity: bool, ids_read: list[str]
) -> None:
    # one describe of each side's topics took about 0.2 s at 10,000 partitions: a loop
    # checks the idle ones when it syncs its topics
    source_cluster, target = source(), mirrored_target()
    for partition, offset in positions.items():
        committed(target, partition, offset)

    prepare(flow, master="local[1]", source=source_cluster, target=target,
            idle_identity=idle_identity)

    assert source_cluster.ids_read == ids_read
    assert target.ids_read == [f"A.{t}" for t in ids_read]


def test_a_log_start_that_passed_the_end_read_before_it_is_a_gap_up_to_the_log_start(
    flow: Flow
) -> None:
    # records 3..9 deleted (DeleteRecords) between the plan's read of the end and of the
    # log start: nothing is copied across them in silence
    source_cluster = FakeCluster("A", ids={"orders": "s1"}).topic("orders", 5, 0, 7)
    source_cluster.marks[TopicPartition("orders", 0)] = Watermarks(10, 5)
    target = mirrored_target()
    committed(target, 0, 3)
    committed(target, 1, 0)
    committed(target, 2, 7)

    prepared = prepare(flow, master="local[1]", source=source_cluster, target=target)

    assert [(g.partition, g.start, g.end) for g in prepared.plan.gaps] == [(0, 3, 10)]
    assert prepared.watermarks[TopicPartition("orders", 0)] == Watermarks(10, 10)


def test_positions_of_a_recreated_source_topic_refuse_the_plan_and_record_an_incident(
    flow: Flow, state_dir: Path
) -> None:
    target = mirrored_target()
    committed(target, 0, 3, source_id="s0")  # counted offsets of the topic's earlier life

    with pytest.raises(SourceRecreatedError, match="deleted and created again"):
        prepare(flow, run_id="r9", source=source(), target=target)

    found = rows(StatePaths(str(state_dir)).incidents, "A->B")
    assert [(r["topic"], r["partition"], r["run_id"]) for r in found] == [("orders", 0, "r9")]
    assert target.altered == []


def test_incidents_go_to_the_state_the_plan_is_given_and_each_is_recorded_once(
    flow: Flow, state_dir: Path
) -> None:
    from tests.unit.steps.fakes import MemoryStore

    target = mirrored_target()
    committed(target, 0, 3, source_id="s0")  # counted offsets of the topic's earlier life
    state = MemoryStore()

    for run_id in ("r1", "r2"):  # met again by the next run: one incident
        with pytest.raises(SourceRecreatedError):
            prepare(flow, run_id=run_id, source=source(), target=target, state=state)

    assert [(r["kind"], r["topic"], r["partition"], r["run_id"], r["detail"])
            for r in state.rows("incidents", "A->B")] == [
        ("source-recreated", "orders", 0, "r1", "topic ID s0 became s1")]
    assert rows(StatePaths(str(state_dir)).incidents, "A->B") == []  # not the Delta tables


@pytest.mark.parametrize("restore", [True, False], ids=["committed-back", "only-planned"])
def test_an_expired_position_is_taken_from_the_offset_map(flow: Flow, restore: bool) -> None:
    # Kafka expired the group's offset of partition 0; the offset-map topic says 0-3 went
    target = mirrored_target()
    target.map_topic = [(0, entry("orders", 0, (0, 4), [(0, 0, 4)], source_id="s1",
                                  target_id="t1"))]

    prepared = prepare(flow, master="local[1]", restore=restore, source=source(),
                       target=target)

    assert spans(prepared.plan.copies) == [("orders", 0, 4, 5), ("orders", 2, 0, 7)]
    restored = [("orders", 0, 4, 4, "s1")] if restore else []
    assert [(w.topic, w.partition, w.position, w.target_end, w.source_id)
            for w in target.positions_written] == restored
    assert target.altered == []


def test_a_restored_position_still_notices_a_recreated_source_topic(flow: Flow) -> None:
    # given: a position restored from the offset map (offsets 0-3 of topic s1 went), then
    # the source topic deleted and created again (s2) with more records than before
    target = mirrored_target()
    target.map_topic = [(0, entry("orders", 0, (0, 4), [(0, 0, 4)], source_id="s1",
                                  target_id="t1"))]
    prepare(flow, master="local[1]", source=source(), target=target)
    recreated = FakeCluster("A", ids={"orders": "s2"}).topic("orders", 9, 0, 7)

    # when / then: the plan is refused, not [4, 9) with 0-3 of the new topic skipped
    with pytest.raises(SourceRecreatedError, match="s1 became s2"):
        prepare(flow, master="local[1]", source=recreated, target=target)


def test_an_expired_position_of_a_recreated_source_topic_is_an_incident_not_a_fresh_start(
    flow: Flow, state_dir: Path
) -> None:
    # given: the offset map knows orders-0 only from the topic's earlier life (s0); its
    # position expired, and the topic was deleted and created again (s1)
    target = mirrored_target()
    target.map_topic = [(0, entry("orders", 0, (0, 4), [(0, 0, 4)], source_id="s0",
                                  target_id="t1"))]

    # when / then: refused (not planned from 0 and appended after the old copies)
    with pytest.raises(SourceRecreatedError, match="s0 became s1"):
        prepare(flow, run_id="r7", master="local[1]", source=source(), target=target)
    found = rows(StatePaths(str(state_dir)).incidents, "A->B")
    assert [(r["topic"], r["partition"], r["run_id"]) for r in found] == [("orders", 0, "r7")]
    assert target.positions_written == [] and target.altered == []


@pytest.mark.parametrize(
    ("remote_marks", "stamps", "setting", "refused"),
    [((0, 80), {0: 1_000}, "refuse", "A.orders-0 (offsets 0..79)"),
     ((40, 80), {40: 1_000}, "refuse", "A.orders-0 (offsets 40..79)"),
     ((0, 12), {}, "refuse", None),  # only aborted records: a first transaction that died
     ((0, 0), {}, "refuse", None),
     ((0, 80), {0: 1_000}, "append", None)],
    ids=["filled-by-another-mirror", "partly-expired", "aborted-only", "empty",
         "append-on-purpose"],
)
def test_a_remote_partition_holding_records_the_flow_never_mapped_is_refused(
    config_with: ConfigWith, remote_marks: tuple[int, int], stamps: dict[int, int],
    setting: str, refused: str | None,
) -> None:
    # given: A.orders-0 on the target holds offsets the flow has no position or map for
    flow = config_with(f"ferry.remote.records.unmapped = {setting}\n").flow("A->B")
    target = FakeCluster("B", ids={"A.orders": "t1"}).topic("A.orders", 0, 0, 0) \
        .topic(MAP_TOPIC, 0)
    target.marks[TopicPartition("A.orders", 0)] = Watermarks(*remote_marks)
    target.stamps[("A.orders", 0)] = stamps

    # when / then
    if refused is None:
        prepared = prepare(flow, master="local[1]", source=source(), target=target)
        assert ("orders", 0, 0, 5) in spans(prepared.plan.copies)
        return
    with pytest.raises(UnmappedRecordsError) as raised:
        prepare(flow, master="local[1]", source=source(), target=target)
    text = str(raised.value)
    assert refused in text and "ferry adopt" in text
    assert "ferry.remote.records.unmapped = append" in text and "\n" not in text
    assert target.altered == []


def test_a_partition_with_a_position_is_never_checked_for_unmapped_records(flow: Flow) -> None:
    target = mirrored_target()
    target.marks[TopicPartition("A.orders", 0)] = Watermarks(0, 80)
    target.stamps[("A.orders", 0)] = {0: 1_000}
    for partition in range(3):
        committed(target, partition, 0)

    prepare(flow, master="local[1]", source=source(), target=target)

    assert target.timestamps_read == []


@dataclass
class CommittedMeanwhile(FakeCluster):
    """A target on which another writer of the flow (a killed client's lanes still running
    on a Spark server) commits records, map entries and positions in one transaction right
    after the plan read the positions and found none."""

    meanwhile: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)
    stable_reads: list[bool] = field(default_factory=list)

    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None = None,
                  stable: bool = True) -> dict[tuple[str, int], tuple[int, str]]:
        if group == GROUP:
            self.stable_reads.append(stable)
        found = super().committed(group, tps)
        if group == GROUP and self.meanwhile:
            self.groups.setdefault(GROUP, {}).update(self.meanwhile)
            for (topic, partition), (end, _) in self.meanwhile.items():
                self.marks[TopicPartition(topic, partition)] = Watermarks(0, end)
                self.stamps[(topic, partition)] = {0: 1_000}
            self.meanwhile = {}
        return found


def committed_meanwhile(source_id: str) -> CommittedMeanwhile:
    """The mirrored target, where partition 0 gets committed up to 4 (for source topic ID
    `source_id`) right after the plan read the positions."""
    target = CommittedMeanwhile("B", ids={"A.orders": "t1"}).topic("A.orders", 0, 0, 0) \
        .topic(MAP_TOPIC, 0)
    target.meanwhile = {("A.orders", 0): (4, encode_position(4, "ferry.A->B.writer-0-of-1",
                                                                source_id))}
    return target


def test_records_the_flows_own_writer_committed_since_the_positions_were_read_are_continued(
    flow: Flow
) -> None:
    # given: a zombie of the flow commits partition 0 up to 4 once the plan read no position
    target = committed_meanwhile("s1")

    # when
    prepared = prepare(flow, master="local[1]", source=source(), target=target)

    # then: the records are the flow's own (a position came with them): not refused, and
    # the plan goes on from the zombie's position
    assert ("orders", 0, 4, 5) in spans(prepared.plan.copies)
    assert prepared.positions[TopicPartition("orders", 0)] == 4
    # the first read takes what is committed (not waiting on a pending transaction, which
    # a killed writer holds open for a minute); the second waits for the pending one
    assert target.stable_reads == [False, True]


def test_a_position_committed_meanwhile_for_another_source_incarnation_is_still_refused(
    flow: Flow
) -> None:
    target = committed_meanwhile("s0")  # for the topic's earlier incarnation

    with pytest.raises(SourceRecreatedError):
        prepare(flow, master="local[1]", source=source(), target=target)


# -- a backfill's plan -----------------------------------------------------------------------

def test_a_backfill_into_a_topic_of_its_own_creates_it_and_writes_one_plan_per_chunk(
    flow: Flow
) -> None:
    target = mirrored_target()
    request = BackfillRequest(target_topic="replay.{topic}", chunk_records=4)

    run = prepare_backfill(flow, request, "bf1", master="local[1]", source=source(),
                           target=target)

    assert target.created == ["replay.orders"]
    assert target.partitions["replay.orders"] == 3
    chunks = [plan_file.read(path) for path in run.chunk_files]
    assert [spans(c.ranges) for c in chunks] == [
        [("orders", 0, 0, 4), ("orders", 2, 0, 4)], [("orders", 0, 4, 5), ("orders", 2, 4, 7)]]
    assert {(c.role, c.flow) for c in chunks} == {("backfill", "A->B")}
    assert run.destinations == {"orders": "replay.orders"}


def test_a_backfill_dry_run_creates_and_writes_nothing(flow: Flow) -> None:
    target = mirrored_target()

    run = prepare_backfill(flow, BackfillRequest(target_topic="replay"), "bf2", apply=False,
                           source=source(), target=target)

    assert (run.chunk_files, target.created) == ((), [])
    assert run.plan.span == 12


@pytest.mark.parametrize(
    ("request_", "error", "says"),
    [
        (BackfillRequest(topics="ord(ers"), UsageError, "not a regular expression"),
        (BackfillRequest(topics="payments"), UsageError, "matches none of the topics"),
        (BackfillRequest(target_topic="__replay"), UsageError, "internal by MM2's rules"),
        (BackfillRequest(on_gap="skip"), UsageError, "give fail or continue"),
        (BackfillRequest(start="yesterday"), UsageError, "from"),
        (BackfillRequest(target_topic="narrow"), TerminalError, "fewer than orders's 3"),
    ],
    ids=["bad-regex", "no-topic-matches", "internal-destination", "bad-on-gap", "bad-bound",
         "destination-with-fewer-partitions"],
)
def test_a_backfill_that_cannot_be_planned_is_refused_before_anything_is_written(
    flow: Flow, request_: BackfillRequest, error: type[Exception], says: str
) -> None:
    target = mirrored_target().topic("narrow", 0)

    with pytest.raises(error, match=says):
        prepare_backfill(flow, request_, "bf3", source=source(), target=target)
    assert target.created == []


def test_a_backfill_reaching_back_past_retention_reports_the_gap_and_copies_nothing(
    flow: Flow, state_dir: Path
) -> None:
    # "replay" once held 0-4 of partition 0 (deleted since); retention has taken 0-2
    src = source()
    src.marks[TopicPartition("orders", 0)] = Watermarks(3, 5)
    target = mirrored_target()
    target.map_topic = [(0, entry("orders", 0, (0, 5), [(0, 0, 5)], target="replay",
                                  source_id="s1", target_id="r0"))]
    request = BackfillRequest(target_topic="replay")

    with pytest.raises(TerminalError, match="deleted by retention"):
        prepare_backfill(flow, request, "bf4", source=src, target=target)

    gaps = rows(StatePaths(str(state_dir)).gaps, "A->B")
    assert [(g["topic"], g["partition"], g["gap_start"], g["gap_end"]) for g in gaps] \
        == [("orders", 0, 0, 3)]
    assert target.created == []

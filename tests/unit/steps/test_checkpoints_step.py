"""The checkpoint step: a source group's committed offsets translated through the offset
map, emitted as MM2 checkpoints by MM2's rule, committed into idle target groups (with
sync.group.offsets.enabled) and recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.config import Config, Flow
from ferry.core.checkpoints import Checkpoint, Translated
from ferry.core.tables import StatePaths
from ferry.errors import TerminalError, UsageError
from ferry.state.reader import rows
from ferry.steps.checkpoints import Translation, run, translate_groups
from tests.unit.conftest import Loader
from tests.unit.steps.fakes import FakeCluster, FakeOffsetMaps, entry

EXACT, BOUNDED, NOT_MIRRORED = Translated.EXACT, Translated.BOUNDED, Translated.NOT_MIRRORED

TOPIC = "A.checkpoints.internal"


def source_with(groups: dict[str, dict[tuple[str, int], tuple[int, str]]]) -> FakeCluster:
    return FakeCluster("A", groups=groups).topic("orders", 100, 100)


# offsets 0-19 committed, 20 a marker, 21-27 aborted, 28 a marker, 29-33 committed, 34 a
# marker: what lands on the target is 0-19 and then 29-33 at 20-24.
TRANSACTIONAL = FakeOffsetMaps([entry("orders", 0, (0, 35), [(0, 0, 20), (29, 20, 5)])])


@pytest.mark.parametrize(
    ("committed", "target", "status"),
    [(0, 0, EXACT), (20, 20, EXACT), (24, 20, EXACT), (29, 20, EXACT), (31, 22, EXACT),
     (35, 25, EXACT), (60, 25, BOUNDED)],
    ids=["at-the-start", "at-a-marker", "inside-an-aborted-transaction",
         "at-the-first-record-after-it", "within-records", "at-the-end-of-what-was-covered",
         "ahead-of-the-mirror"],
)
def test_a_group_offset_translates_to_the_first_mirrored_record_at_or_after_it(
    config: Config, committed: int, target: int, status: str
) -> None:
    # given
    source = source_with({"app": {("orders", 0): (committed, "meta")}})
    # when
    found = translate_groups(config.flow("A->B"), source=source, entries_of=TRANSACTIONAL)
    # then
    assert found == [Translation("app", "orders", 0, committed, "meta", "A.orders", target,
                                 status)]


def test_a_partition_nothing_was_mirrored_of_yet_is_not_mirrored_and_gets_no_checkpoint(
    config: Config
) -> None:
    source = source_with({"app": {("orders", 1): (5, "")}})

    (found,) = translate_groups(config.flow("A->B"), source=source, entries_of=TRANSACTIONAL)

    assert (found.partition, found.target_offset, found.status) == (1, None, NOT_MIRRORED)
    assert found.checkpoint() is None


def test_only_groups_the_group_filter_accepts_on_mirrored_topics_are_translated(
    config: Config
) -> None:
    source = source_with({"app": {("orders", 0): (3, ""), ("local.internal", 0): (3, "")},
                          "connect-sink": {("orders", 0): (3, "")},
                          "__ferry-positions.A": {("orders", 0): (3, "")}})
    source.topic("local.internal", 5)
    maps = FakeOffsetMaps([entry("orders", 0, (0, 10), [(0, 0, 10)])])

    found = translate_groups(config.flow("A->B"), source=source, entries_of=maps)

    assert [(t.group, t.topic, t.partition) for t in found] == [("app", "orders", 0)]
    assert maps.asked == [("A->B", frozenset({"orders"}))]  # only the map it needs


def test_naming_a_group_the_filter_refuses_is_a_usage_error(config: Config) -> None:
    with pytest.raises(UsageError, match="does not pass the flow's group filter"):
        translate_groups(config.flow("A->B"), "connect-sink", source=source_with({}),
                         entries_of=FakeOffsetMaps())


def test_naming_one_group_translates_only_that_group(config: Config) -> None:
    source = source_with({"app": {("orders", 0): (3, "")}, "other": {("orders", 0): (4, "")}})
    maps = FakeOffsetMaps([entry("orders", 0, (0, 10), [(0, 0, 10)])])

    found = translate_groups(config.flow("A->B"), "other", source=source, entries_of=maps)

    assert [(t.group, t.target_offset) for t in found] == [("other", 4)]


def test_an_offset_on_a_topic_that_came_from_the_target_fails_back_through_the_reverse_map(
    load: Loader, state_dir: Path
) -> None:
    # given: consumers failed over to A earlier and committed on B.orders there
    config = load(f"clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = "
                  f"b:9092\nA->B.enabled = true\nB->A.enabled = true\n"
                  f"ferry.state.dir = {state_dir}\n")
    source = FakeCluster("A", groups={"app": {("B.orders", 0): (12, "m")}}).topic(
        "B.orders", 50)
    # B's orders 100..149 went to B.orders 0..49 on A
    maps = FakeOffsetMaps([entry("orders", 0, (100, 150), [(100, 0, 50)], flow="B->A",
                                 target="B.orders")])
    # when
    found = translate_groups(config.flow("A->B"), reverse=config.flow("B->A"),
                             source=source, entries_of=maps)
    # then: back on B, at the original record
    assert found == [Translation("app", "B.orders", 0, 12, "m", "orders", 112, EXACT)]


def test_without_the_reverse_flow_an_offset_on_a_topic_from_the_target_is_skipped(
    config: Config
) -> None:
    source = FakeCluster("A", groups={"app": {("B.orders", 0): (12, "")}}).topic(
        "B.orders", 50)

    assert translate_groups(config.flow("A->B"), source=source,
                            entries_of=FakeOffsetMaps()) == []


MAPS = FakeOffsetMaps([entry("orders", 0, (0, 100), [(0, 0, 100)]),
                       entry("orders", 1, (0, 100), [(0, 500, 100)])])


def test_a_run_emits_a_checkpoint_per_translated_partition_to_the_checkpoints_topic(
    config: Config
) -> None:
    source = source_with({"app": {("orders", 0): (30, "a"), ("orders", 1): (40, "b")}})
    target = FakeCluster("B")

    report = run(config.flow("A->B"), "r1", source=source, target=target, entries_of=MAPS)

    assert target.ensured == [(TOPIC, 3, "checkpoints.topic.replication.factor")]
    assert target.checkpoints[TOPIC] == report.emitted == [
        Checkpoint("app", "A.orders", 0, 30, 30, "a"),
        Checkpoint("app", "A.orders", 1, 40, 540, "b")]


class NewTarget(FakeCluster):
    """A target on which a topic just created cannot be read yet: a consumer asked at once
    may not know it (`_UNKNOWN_PARTITION` from its offsets, seen in CI)."""

    fresh = False
    """Whether the last topic ensured was created then."""

    def read_checkpoints(self, flow: Flow, topic: str) -> list[Checkpoint]:
        if self.fresh:
            raise TerminalError(f"cluster B: reading {topic}-0 failed: Failed to get "
                                "watermark offsets: Local: Unknown partition")
        return super().read_checkpoints(flow, topic)

    def ensure_mm2_topic(self, topic: str, replication_factor: int, setting: str) -> bool:
        self.fresh = topic not in self.partitions
        return super().ensure_mm2_topic(topic, replication_factor, setting)


def test_the_first_run_does_not_read_back_the_checkpoints_topic_it_created(
    config: Config
) -> None:
    # given: a target without the checkpoints topic
    source = source_with({"app": {("orders", 0): (30, "a")}})
    target = NewTarget("B")

    # when: the first run creates it (a topic created now holds no checkpoints)
    first = run(config.flow("A->B"), "r1", source=source, target=target, entries_of=MAPS)
    # and a later run finds it there
    again = run(config.flow("A->B"), "r2", source=source, target=target, entries_of=MAPS)

    assert [c.upstream_offset for c in first.emitted] == [30]
    assert again.emitted == []  # read back: unchanged, not repeated


@pytest.mark.parametrize(
    ("first", "then", "emitted"),
    [(30, 30, False), (30, 35, True), (30, 20, True)],
    ids=["unchanged-is-not-repeated", "advanced-is-emitted", "rewound-on-the-source-is-emitted"],
)
def test_a_checkpoint_is_emitted_again_only_when_the_group_moved(
    config: Config, first: int, then: int, emitted: bool
) -> None:
    source = source_with({"app": {("orders", 0): (first, "")}})
    target = FakeCluster("B")
    run(config.flow("A->B"), "r1", source=source, target=target, entries_of=MAPS)
    source.groups["app"][("orders", 0)] = (then, "")

    report = run(config.flow("A->B"), "r2", source=source, target=target, entries_of=MAPS)

    assert [c.upstream_offset for c in report.emitted] == ([then] if emitted else [])


@pytest.fixture
def syncing(load: Loader, state_dir: Path) -> Config:
    return load(f"clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = "
                f"b:9092\nA->B.enabled = true\nsync.group.offsets.enabled = true\n"
                f"ferry.state.dir = {state_dir}\n")


@pytest.mark.parametrize(
    ("state", "on_target", "committed"),
    [("ABSENT", None, 30), ("EMPTY", 10, 30), ("EMPTY", 45, 45), ("STABLE", 10, 10)],
    ids=["absent-group-is-created", "idle-group-moves-forward", "never-moved-backwards",
         "active-group-is-left-alone"],
)
def test_group_offsets_are_synced_only_into_idle_target_groups_and_only_forward(
    syncing: Config, state: str, on_target: int | None, committed: int | None
) -> None:
    # given
    source = source_with({"app": {("orders", 0): (30, "m")}})
    target = FakeCluster("B", states={"app": state})
    if on_target is not None:
        target.groups["app"] = {("A.orders", 0): (on_target, "")}
    # when
    report = run(syncing.flow("A->B"), "r1", source=source, target=target, entries_of=MAPS)
    # then
    assert target.group_offsets("app", [("A.orders", 0)]).get(("A.orders", 0)) == committed
    assert report.synced == ({"app": 1} if committed not in (on_target, None) else {})
    assert report.active == (["app"] if state == "STABLE" else [])


def test_group_offsets_are_not_synced_unless_enabled(config: Config) -> None:
    source = source_with({"app": {("orders", 0): (30, "")}})
    target = FakeCluster("B")

    report = run(config.flow("A->B"), "r1", source=source, target=target, entries_of=MAPS)

    assert (report.synced, target.altered) == ({}, [])
    assert report.emitted  # checkpoints are emitted all the same


def test_every_translation_is_recorded_with_whether_it_was_emitted_and_synced(
    syncing: Config, state_dir: Path
) -> None:
    source = source_with({"app": {("orders", 0): (30, ""), ("orders", 1): (7, "")}})
    maps = FakeOffsetMaps([entry("orders", 0, (0, 100), [(0, 0, 100)])])

    run(syncing.flow("A->B"), "r1", source=source, target=FakeCluster("B"), entries_of=maps)

    recorded = rows(StatePaths(str(state_dir)).checkpoints, "A->B", run_id="r1")
    assert sorted((r["group_id"], r["source_partition"], r["source_offset"],
                   r["target_offset"], r["status"], r["emitted"], r["group_synced"])
                  for r in recorded) == [("app", 0, 30, 30, EXACT, True, True),
                                         ("app", 1, 7, None, NOT_MIRRORED, False, True)]

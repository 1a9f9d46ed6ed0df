"""How far Delta is behind the offset-map topic on the target (the recording lag), as an
exporter in another process than the loop sees it: from the topic and Delta's cursor only."""

from __future__ import annotations

import pytest

from ferry.config import Config
from ferry.core.internal import offset_map_topic
from ferry.core.offsetmap import MapCursor
from ferry.core.planner import TopicPartition, Watermarks
from ferry.observe.status import FlowStatus
from ferry.steps.recording_lag import RecordingLag, recording_lag
from tests.unit.conftest import BASE, Loader
from tests.unit.steps.fakes import FakeCluster, entry

NOW_MS = 1_800_000_000_000


@pytest.fixture
def config(load: Loader) -> Config:
    return load(BASE + "A->B.topics = orders\n")


def target_with(config: Config, cursor: int, end: int,
                committed_at: dict[int, int]) -> FakeCluster:
    """The target of flow A->B: Delta's cursor at topic offset `cursor`, the offset-map
    topic's end `end`, and committed entries at the offsets of `committed_at` (topic
    offset -> when its lane committed it, epoch ms)."""
    flow = config.flow("A->B")
    target = FakeCluster("B", cursor=MapCursor("map-id", cursor, False))
    target.marks[TopicPartition(offset_map_topic(flow), 0)] = Watermarks(0, end)
    target.map_topic = [(offset, entry("orders", 0, (offset, offset + 1), run="r",
                                       committed_at_ms=at))
                        for offset, at in committed_at.items()]
    return target


def test_entries_past_deltas_cursor_are_counted_and_the_oldest_commit_dates_the_lag(
    config: Config
) -> None:
    # given: Delta holds the topic up to offset 3; entries at 4, 6 and 8 are committed
    # (markers between), the oldest by commit time not the first by offset
    target = target_with(config, 3, 10, {2: NOW_MS - 900_000, 4: NOW_MS - 40_000,
                                         6: NOW_MS - 75_000, 8: NOW_MS - 1_000})

    lag = recording_lag(config.flow("A->B"), target)

    assert lag == RecordingLag(entries=3, oldest_ms=NOW_MS - 75_000)
    assert lag.age_s(NOW_MS) == 75.0


@pytest.mark.parametrize(("cursor", "end", "committed"), [
    (7, 9, {6: NOW_MS - 5_000}),  # up to the commit marker after the last recorded entry
    (-1, 0, {}),  # the topic is empty
], ids=["caught-up", "empty-topic"])
def test_a_delta_that_holds_every_committed_entry_is_not_behind(
    config: Config, cursor: int, end: int, committed: dict[int, int]
) -> None:
    lag = recording_lag(config.flow("A->B"), target_with(config, cursor, end, committed))
    assert lag == RecordingLag(0, None)
    assert lag.age_s(NOW_MS) == 0.0


def test_no_offset_map_topic_yet_is_no_lag(config: Config) -> None:
    target = FakeCluster("B", cursor=MapCursor("", -1, False))
    assert recording_lag(config.flow("A->B"), target) == RecordingLag(0, None)


def test_a_clock_behind_the_lanes_never_makes_a_negative_age() -> None:
    assert RecordingLag(1, NOW_MS + 500).age_s(NOW_MS) == 0.0


@pytest.mark.parametrize(("entries", "seconds", "said"), [
    (3, 125.0, "; Delta behind the target by 3 offset-map entries, the oldest 125s old"),
    (0, 0.0, ""),
    (None, None, ""),
], ids=["behind", "caught-up", "unknown"])
def test_status_says_how_many_entries_delta_lacks_and_how_old_the_oldest_is(
    entries: int | None, seconds: float | None, said: str
) -> None:
    status = FlowStatus("A->B", "A", "B", state_behind_entries=entries,
                        state_behind_seconds=seconds)
    first = status.text().splitlines()[0]
    assert first.endswith("checkpoints age -" + said)
    assert status.to_json()["state_behind_seconds"] == seconds

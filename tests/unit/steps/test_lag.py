"""How far a flow is behind: per mirrored source partition, the source's last stable offset
minus the flow's position (never below the log start), and the age of the oldest record not
mirrored yet."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ferry.config import Config
from ferry.core.tables import StatePaths
from ferry.state.reader import rows
from ferry.steps.lag import PartitionStatus, partition_lag, record_lag
from tests.unit.steps.fakes import FakeCluster

GROUP = "__ferry-positions.A"


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize(
    ("low", "end", "position", "lag"),
    [
        (0, 100, None, 100),
        (0, 100, 60, 40),
        (0, 100, 100, 0),
        (30, 100, 10, 70),
        (30, 100, None, 70),
        (0, 100, 120, 0),
        (0, 0, None, 0),
    ],
    ids=["nothing-copied-yet", "part-way", "caught-up", "position-below-the-log-start",
         "nothing-copied-and-records-expired", "position-past-the-end", "empty-partition"],
)
def test_lag_in_records_is_the_source_end_minus_the_position_from_the_log_start(
    config: Config, low: int, end: int, position: int | None, lag: int
) -> None:
    # given
    source = FakeCluster("A").topic("orders", end, start=low)
    source.stamps[("orders", 0)] = {o: now_ms() for o in range(low, end)}
    offsets = {} if position is None else {("A.orders", 0): (position, "")}
    target = FakeCluster("B", groups={GROUP: offsets})
    # when
    (found,) = partition_lag(config.flow("A->B"), source=source, target=target)
    # then
    assert (found.source_end, found.position, found.lag_records) == (end, position, lag)


def test_lag_in_seconds_is_the_age_of_the_oldest_record_not_mirrored(
    config: Config
) -> None:
    source = FakeCluster("A").topic("orders", 10)
    source.stamps[("orders", 0)] = {4: now_ms() - 90_000, 5: now_ms() - 30_000,
                                    9: now_ms() - 1_000}
    target = FakeCluster("B", groups={GROUP: {("A.orders", 0): (5, "")}})

    (found,) = partition_lag(config.flow("A->B"), source=source, target=target)

    assert found.lag_seconds == pytest.approx(30, abs=2)
    assert source.timestamps_read == [("orders", 0, 5)]


def test_a_partition_caught_up_is_zero_seconds_behind_without_reading_a_record(
    config: Config
) -> None:
    source = FakeCluster("A").topic("orders", 10)
    source.stamps[("orders", 0)] = {9: now_ms() - 60_000}
    target = FakeCluster("B", groups={GROUP: {("A.orders", 0): (10, "")}})

    (found,) = partition_lag(config.flow("A->B"), source=source, target=target)

    assert (found.lag_records, found.lag_seconds) == (0, 0.0)
    assert source.timestamps_read == []


def test_each_mirrored_partition_is_reported_with_its_remote_topic_and_no_other(
    config: Config
) -> None:
    source = FakeCluster("A").topic("orders", 5, 7).topic("__consumer_offsets", 3)
    target = FakeCluster("B", groups={GROUP: {("A.orders", 1): (7, "")}})

    found = partition_lag(config.flow("A->B"), source=source, target=target)

    assert found == [PartitionStatus("orders", 0, 5, None, 5, 0.0, "A.orders"),
                     PartitionStatus("orders", 1, 7, 7, 0, 0.0, "A.orders")]


def test_the_lag_history_gets_one_row_per_partition_tagged_with_the_run(
    config: Config, state_dir: Path
) -> None:
    source = FakeCluster("A").topic("orders", 5, 7)
    target = FakeCluster("B", groups={GROUP: {("A.orders", 0): (2, "")}})

    written = record_lag(config.flow("A->B"), "run-1", source=source, target=target)

    recorded = rows(StatePaths(str(state_dir)).lag, "A->B", run_id="run-1")
    assert written == 2
    assert sorted((r["topic"], r["partition"], r["source_end"], r["position"],
                   r["lag_records"]) for r in recorded) == [
        ("orders", 0, 5, 2, 3), ("orders", 1, 7, None, 7)]


def test_each_partition_carries_its_source_topics_retention_by_time(
    config: Config
) -> None:
    # given: one topic deleting records after an hour, one kept for ever
    from ferry.core.sync.configs import ConfigValue

    source = FakeCluster("A").topic("orders", 5).topic("audit", 5)
    source.configs["orders"] = {"retention.ms": ConfigValue("3600000"),
                                "cleanup.policy": ConfigValue("delete")}
    source.configs["audit"] = {"retention.ms": ConfigValue("-1")}
    target = FakeCluster("B", groups={GROUP: {}})
    source.stamps[("orders", 0)] = {0: now_ms()}
    source.stamps[("audit", 0)] = {0: now_ms()}

    # when
    found = partition_lag(config.flow("A->B"), source=source, target=target)

    # then: what a record not mirrored may live, for the alert on time left
    assert {p.topic: p.retention_seconds for p in found} == {"orders": 3600.0, "audit": None}

"""Failover's pure decisions: which translated offsets go into which target groups (only
idle groups, only forward), and what a dead source leaves at risk."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ferry.core.checkpoints import Checkpoint, TargetGroup
from ferry.core.failover import (
    GroupLine,
    GroupOutcome,
    at_risk,
    group_filter,
    latest_rows,
    plan_commits,
)

COMMITTED, CURRENT, ACTIVE = GroupOutcome.COMMITTED, GroupOutcome.CURRENT, GroupOutcome.ACTIVE

T0 = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)


def cp(group: str, partition: int, offset: int) -> Checkpoint:
    return Checkpoint(group, "A.orders", partition, offset, offset)


@pytest.mark.parametrize(("state", "offsets", "outcomes"), [
    ("ABSENT", {}, [COMMITTED, COMMITTED]),
    ("EMPTY", {("A.orders", 0): 50}, [COMMITTED, COMMITTED]),
    ("EMPTY", {("A.orders", 0): 100, ("A.orders", 1): 500}, [CURRENT, CURRENT]),
    ("DEAD", {("A.orders", 1): 10}, [COMMITTED, COMMITTED]),
    ("STABLE", {}, [ACTIVE, ACTIVE]),
    ("PREPARING_REBALANCE", {}, [ACTIVE, ACTIVE]),
], ids=["absent", "behind", "already-there-or-ahead", "dead", "active", "rebalancing"])
def test_offsets_go_only_into_idle_groups_and_only_forward(
        state: str, offsets: dict[tuple[str, int], int], outcomes: list[str]) -> None:
    checkpoints = [cp("billing", 0, 100), cp("billing", 1, 200)]
    planned = plan_commits(checkpoints, {"billing": TargetGroup(state, offsets)})
    assert [planned[c.key] for c in checkpoints] == outcomes


@pytest.mark.parametrize(("pattern", "group", "matches"), [
    (None, "anything", True),
    ("billing|audit", "billing", True),
    ("billing|audit", "billing-v2", False),  # the whole id, not a prefix
    ("billing.*", "billing-v2", True),
])
def test_groups_match_by_their_whole_id(pattern: str | None, group: str,
                                        matches: bool) -> None:
    wanted = group_filter(pattern)
    assert (wanted is None or wanted.fullmatch(group) is not None) is matches


def test_the_newest_row_of_each_key_wins() -> None:
    rows = [{"g": "a", "p": 0, "at": T0, "v": 1}, {"g": "a", "p": 0, "at": T0 + timedelta(1),
                                                    "v": 2},
            {"g": "a", "p": 1, "at": T0, "v": 3}, {"g": "b", "p": 0, "at": T0, "v": 4}]
    assert [r["v"] for r in latest_rows(rows, ("g", "p"), "at")] == [2, 3, 4]


def test_what_is_at_risk_is_each_partitions_lag_after_the_last_recorded_run() -> None:
    lag = [{"topic": "orders", "partition": 0, "lag_records": 5, "lag_seconds": 3.0,
            "recorded_at": T0},
           {"topic": "orders", "partition": 0, "lag_records": 40, "lag_seconds": 12.5,
            "recorded_at": T0 + timedelta(minutes=1)},
           {"topic": "orders", "partition": 1, "lag_records": None, "lag_seconds": None,
            "recorded_at": T0}]
    assert [(r.partition, r.records, r.seconds, r.as_of) for r in at_risk(lag)] == [
        (0, 40, 12.5, T0 + timedelta(minutes=1)), (1, 0, 0.0, T0)]


def test_a_line_reads_as_the_operator_needs_it() -> None:
    line = GroupLine("billing", "orders", 1, 170, "A.orders", 172, "exact", COMMITTED)
    assert line.text() == "billing: orders-1@170 -> A.orders-1@172 exact, committed"
    assert GroupLine("billing", "orders", 2, 3, "A.orders", None, "not-mirrored",
                     "nothing-mirrored").text() == (
        "billing: orders-2@3 -> - not-mirrored, nothing-mirrored")

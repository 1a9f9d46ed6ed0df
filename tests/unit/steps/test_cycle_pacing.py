"""A long-running loop's paced steps (lag, heartbeats, sync, checkpoints) count as run
only once they succeeded: a step that failed is tried again in the next cycle, not an
interval later."""

from __future__ import annotations

from typing import Any

import pytest

import ferry.steps.lag
from ferry.config import MirrorConfig
from ferry.core.sync.schedule import Pace
from ferry.errors import TransientError
from ferry.steps.cycle import Clusters, Cycle
from tests.unit.steps.fakes import FakeCluster


def test_a_lag_point_that_failed_is_taken_again_in_the_next_cycle(
    config: MirrorConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a continuous loop's pace, and a target that fails the first lag point
    flow = config.flow("A->B")
    calls: list[str] = []

    def record_lag(_flow: Any, run_id: str, **_: Any) -> None:
        calls.append(run_id)
        if len(calls) == 1:
            raise TransientError("cluster B: reading the end of A.orders-0 failed")

    monkeypatch.setattr(ferry.steps.lag, "record_lag", record_lag)
    pace = Pace()
    clusters = Clusters(FakeCluster("A"), FakeCluster("B"))  # type: ignore[arg-type]

    # when: two idle cycles a moment apart (the lag interval is a minute)
    for run_id in ("one", "two", "three"):
        Cycle(config, flow, run_id, pace=pace, clusters=clusters).record(idle=True)

    # then: the failed point was taken again at once; the one after it waits its interval
    assert calls == ["one", "two"]

"""A deployment's life compressed into minutes, on real brokers whose group offsets expire
a minute after their last commit: an idle partition across the expiry, a recreated source
topic, a target restart right before a cycle, and cycles back to back. Every cycle succeeds
or fails loudly where it must, and the remote topics match the source record by record."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ferry.config import Flow
from ferry.core.internal import positions_group
from ferry.core.tables import StatePaths
from ferry.kafka.admin import Admin
from ferry.state.reader import rows
from ferry.steps import positions
from ferry.steps.plan import SourceRecreatedError
from tests.conftest import restart_target
from tests.support.kafka_data import (
    assert_exact,
    create_topic,
    flow_config,
    produce,
    read_all,
    recreate_topic,
    run_cycle,
)

pytestmark = pytest.mark.integration


def _records(count: int, partition: int, tag: str) -> list[tuple[bytes | None, bytes | None,
                                                               int]]:
    return [(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode(), partition)
            for i in range(count)]


def _position(flow: Flow, remote: str, partition: int) -> int | None:
    found = Admin(flow.target_admin).group_offsets(positions_group(flow), [(remote, partition)])
    return found.get((remote, partition))


def test_a_deployment_stays_exact_across_expiry_recreation_restart_and_many_cycles(
    expiring_clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    clusters = expiring_clusters
    idle, recreated = f"{topic_name}-idle", f"{topic_name}-recreated"
    create_topic(clusters["source"], idle, 2)
    create_topic(clusters["source"], recreated, 1)
    produce(clusters["source"], idle, _records(500, 0, "quiet"))
    produce(clusters["source"], idle, _records(50, 1, "busy"))
    produce(clusters["source"], recreated, _records(100, 0, "old"))
    flow = flow_config(tmp_path, clusters, f"{topic_name}-.*").enabled_flows[0]
    cycles, incidents = 0, 0

    def cycle(restore: bool = True) -> int:
        nonlocal cycles
        cycles += 1
        return run_cycle(flow, f"cycle-{cycles}", restore=restore)

    assert cycle() == 650

    # A source topic deleted and created again with more records than were mirrored: an
    # incident, loud, nothing copied; the operator resets; the new topic comes in whole.
    recreate_topic(clusters["source"], recreated)
    produce(clusters["source"], recreated, _records(300, 0, "new"))
    with pytest.raises(SourceRecreatedError, match="deleted and created again"):
        cycle()
    incidents += 1
    positions.reset(flow, recreated, "earliest")
    assert cycle() == 300
    remote = read_all(clusters["target"], flow.remote_topic(recreated), 0)
    assert [r.content() for r in remote[100:]] == \
        [r.content() for r in read_all(clusters["source"], recreated, 0)]

    # The quiet partition stays idle while its neighbour flows, until Kafka expires its
    # position (60 s after its last commit); every cycle meanwhile copies only what is new.
    # These cycles leave an expired position to the restart below: one that restored it
    # would commit it afresh, and the expiry this waits for would start over.
    remote_idle = flow.remote_topic(idle)
    assert _position(flow, remote_idle, 0) == 500
    deadline = time.monotonic() + 150
    while _position(flow, remote_idle, 0) is not None:
        assert time.monotonic() < deadline, "Kafka never expired the idle position"
        produce(clusters["source"], idle, _records(10, 1, f"busy{cycles}"))
        assert cycle(restore=False) == 10
        time.sleep(4)

    # The target restarts right before a cycle: the cycle waits out the loading coordinator
    # and restores the expired position from the offset map instead of copying it again.
    produce(clusters["source"], idle, _records(10, 1, "after-restart"))
    restart_target(clusters)
    assert cycle() == 10
    assert _position(flow, remote_idle, 0) == 500
    while cycles < 12 + incidents:
        assert cycle() == 0

    assert_exact(flow, clusters, idle, 2)
    assert len(read_all(clusters["target"], remote_idle, 0)) == 500
    # and what happened is on record, each incident once
    found = rows(StatePaths(flow.ferry.state_dir).incidents, flow.name)
    assert sorted((r["kind"], r["topic"], r["partition"]) for r in found
                  if r["kind"] == "source-recreated") == [("source-recreated", recreated, 0)]
    assert any(r["kind"] == "position-restored" and r["topic"] == idle and r["partition"] == 0
               and r["detail"].startswith("restored 500") for r in found)

"""`ferry failover` as one operation, on real clusters.

planned: records still unmirrored and a group that committed on the source; a dry run
changes nothing; `--execute` catches the flow up in whole cycles, commits the group into
the target, and the group then reads there exactly what it had not read (0 re-read, 0
lost). unplanned: the source broker is stopped; the last translations go into the target
group without a word to the dead cluster, and the report names the records at risk.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from ferry.local import cluster
from ferry.steps.cycle import plans_dir
from tests.support.failover import assert_exact_failover, commit_source
from tests.support.groups import positions, target_offsets
from tests.support.kafka_data import create_topic, flow_config, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def ferry(*args: str, timeout: float = 600) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([sys.executable, "-m", "ferry.cli.main", *args, "--json"],
                          capture_output=True, text=True, timeout=timeout, check=False)
    data = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    return done.returncode, data, done.stderr




def test_a_planned_failover_catches_up_then_moves_the_group_exactly(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, connect_url: str
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), i % 2)
                                             for i in range(400)])
    group, other = f"{topic_name}-billing", f"{topic_name}-audit"
    commit_source(clusters["source"], group, topic_name, {0: 120, 1: 170})
    commit_source(clusters["source"], other, topic_name, {0: 5})
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    args = ("failover", config.path, "--flow", flow.name, "--mode", "planned",
            "--groups", f"{topic_name}-bill.*", "--master", connect_url)

    code, shown, err = ferry(*args)  # a dry run: nothing mirrored yet, nothing committed

    assert code == 0, err[-3000:]
    assert shown["executed"] is False and shown["report"] is None
    assert {g["outcome"] for g in shown["groups"]} <= {"nothing-mirrored", "would-commit"}
    assert target_offsets(clusters["target"], group, remote, 2) == {}
    # ... and wrote no plan file (a dry run changes nothing, on the clusters or in the state)
    assert not list(plans_dir(flow).glob("*.json"))

    code, done, err = ferry(*args, "--execute")

    assert code == 0, err[-3000:]
    assert done["cycles"] >= 2  # one copied, the last found nothing left
    assert sorted((g["group"], g["partition"], g["source_offset"], g["target_offset"],
                   g["status"], g["outcome"]) for g in done["groups"]) == [
        (group, 0, 120, 120, "exact", "committed"), (group, 1, 170, 170, "exact", "committed")]
    assert target_offsets(clusters["target"], group, remote, 2) == {0: 120, 1: 170}
    assert target_offsets(clusters["target"], other, remote, 2) == {}  # not in --groups
    assert done["reverse"]["configured"] is False
    assert json.loads(Path(done["report"]).read_text())["groups"] == done["groups"]
    assert_exact_failover(flow, clusters, topic_name, 2, group, {0: 120, 1: 170})

    # and once Kafka has expired the flow's positions (deleted here), a dry run restores
    # none of them from the offset map and writes no plan: it changes nothing
    from ferry.core.internal import positions_group

    admin = AdminClient({"bootstrap.servers": clusters["target"]})
    admin.delete_consumer_groups([positions_group(flow)])[positions_group(flow)].result(30)
    plans = sorted(plans_dir(flow).glob("*.json"))

    code, shown, err = ferry(*args)

    assert code == 0 and shown["executed"] is False, err[-3000:]
    assert positions(clusters, flow, [(remote, 0), (remote, 1)]) == [-1001, -1001]
    assert sorted(plans_dir(flow).glob("*.json")) == plans


def test_an_unplanned_failover_never_waits_on_the_dead_source_and_reports_what_is_at_risk(
    tmp_path: Path, connect_url: str
) -> None:
    from ferry.config import load_config
    from ferry.steps.lag import record_lag

    source_root, target_root = tmp_path / "source", tmp_path / "target"
    (source_state,) = cluster.up(("source",), source_root)
    (target_state,) = cluster.up(("target",), target_root)
    try:
        source, target = source_state.bootstrap, target_state.bootstrap
        create_topic(source, "orders", 2)
        produce(source, "orders", [(None, f"v{i}".encode(), i % 2) for i in range(200)])
        group = "billing"
        commit_source(source, group, "orders", {0: 60, 1: 90})
        path = tmp_path / "mm2.properties"
        path.write_text(f"clusters = source, target\nsource.bootstrap.servers = {source}\n"
                        f"target.bootstrap.servers = {target}\nsource->target.enabled = true\n"
                        "source->target.topics = orders\nreplication.factor = 1\n"
                        "checkpoints.topic.replication.factor = 1\n"
                        "heartbeats.topic.replication.factor = 1\n"
                        f"ferry.state.dir = {tmp_path / 'state'}\n")
        code, mirrored, err = ferry("mirror", str(path), "--flow", "source->target",
                                    "--master", connect_url)
        assert code == 0 and mirrored["idle"] is False, err[-3000:]
        # the last run's view: 30 records written after it, never mirrored
        produce(source, "orders", [(None, b"late", i % 2) for i in range(30)])
        flow = load_config(path).flow("source->target")
        record_lag(flow, "last-run")

        cluster.down(source_root)  # the source is gone
        code, done, err = ferry("failover", str(path), "--flow", "source->target",
                                "--mode", "unplanned", "--execute", timeout=120)

        assert code == 0, err[-3000:]
        assert sorted((g["partition"], g["source_offset"], g["target_offset"], g["status"],
                       g["outcome"]) for g in done["groups"]) == [
            (0, 60, 60, "exact", "committed"), (1, 90, 90, "exact", "committed")]
        assert target_offsets(target, group, "source.orders", 2) == {0: 60, 1: 90}
        assert sorted((r["partition"], r["records"]) for r in done["at_risk"]) == [
            (0, 15), (1, 15)]
        assert all(r["seconds"] >= 0 for r in done["at_risk"])
    finally:
        cluster.down(source_root)
        cluster.down(target_root, wipe=True)

"""`ferry backfill`, the backfill DAG's path without Airflow: a dry run writes nothing, a
bad bound is one line (exit 2), and a run copies the window chunk after chunk with
spark-submit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from ferry.core.tables import StatePaths
from ferry.state.reader import rows
from tests.support.cli import ferry
from tests.support.kafka_data import conf, create_topic, flow_config, produce, read_all

pytestmark = pytest.mark.integration


def test_without_execute_a_backfill_shows_the_chunks_and_writes_nothing(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(40)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]

    result = ferry("backfill", config.path, "--flow", flow.name, "--from", "4",
                   "--target-topic", "inv.{topic}", "--chunk-records", "6", "--json")

    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dry_run"] and data["partitions"] == {
        f"{topic_name}-0": {"from": 4, "to": 20}, f"{topic_name}-1": {"from": 4, "to": 20}}
    assert data["chunk_labels"] == [f"chunk {k}/3: {topic_name}, 2 partitions, {n} offsets"
                                    for k, n in ((1, 12), (2, 12), (3, 8))]
    assert data["destinations"] == {topic_name: f"inv.{topic_name}"}
    topics = AdminClient(conf(clusters["target"])).list_topics(timeout=10).topics
    assert f"inv.{topic_name}" not in topics
    assert rows(StatePaths(flow.ferry.state_dir).gaps, flow.name) == []


def test_a_bad_bound_is_one_line_and_exit_2(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    config = flow_config(tmp_path, clusters, topic_name)

    result = ferry("backfill", config.path, "--flow", config.enabled_flows[0].name,
                   "--from", "yesterday")

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "ferry: from='yesterday': give earliest, an offset (e.g. 1200) or an ISO time "
        "(e.g. 2026-11-26T08:00:00Z)"]


@pytest.mark.spark
def test_a_backfill_copies_its_window_chunk_after_chunk(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(30)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]

    result = ferry("backfill", config.path, "--flow", flow.name, "--from", "5", "--to", "25",
                   "--target-topic", "inv.{topic}", "--chunk-records", "12", "--execute",
                   "--json")

    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["job_exit_code"] == 0
    source = [r.content() for r in read_all(clusters["source"], topic_name, 0)]
    assert [r.content() for r in read_all(clusters["target"], f"inv.{topic_name}", 0)] == \
        source[5:25]
    copied = rows(StatePaths(flow.ferry.state_dir).runs, flow.name)
    assert sorted((r["range_start"], r["range_end"], r["records"]) for r in copied) == [
        (5, 17, 12), (17, 25, 8)]

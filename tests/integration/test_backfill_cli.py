"""`ferry backfill`, the backfill DAG's path without Airflow: a dry run writes nothing, a
bad bound is one line (exit 2), and a run copies the window chunk after chunk with
spark-submit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from ferry.config import Config
from ferry.core.tables import StatePaths
from ferry.state.reader import rows
from tests.support.cli import ferry
from tests.support.kafka_data import conf, create_topic, flow_config, produce, read_all

pytestmark = pytest.mark.integration


def thirty_records(clusters: dict[str, str], topic: str, tmp_path: Path) -> Config:
    """A one-partition source topic of 30 records, and the config of the flow mirroring it."""
    create_topic(clusters["source"], topic, 1)
    produce(clusters["source"], topic, [(None, f"v{i}".encode(), 0) for i in range(30)])
    return flow_config(tmp_path, clusters, topic)


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


def test_a_backfill_into_the_flows_topic_on_a_partition_never_mirrored_starts_at_its_start(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a partition the flow never mirrored (no position, no remote records)
    config = thirty_records(clusters, topic_name, tmp_path)
    flow = config.enabled_flows[0]

    # when: a backfill into the flow's own topic asks to start past its first offset
    result = ferry("backfill", config.path, "--flow", flow.name, "--from", "5", "--execute")

    # then: refused in one line naming what it would leave unmirrored and the way on,
    # with nothing written (no remote topic, no gap recorded)
    assert result.returncode == 1  # refused by what the clusters hold, not a usage error
    (line,) = result.stderr.strip().splitlines()
    assert "nothing was written" in line and "has not mirrored it yet" in line
    assert "leave offsets 0..4 unmirrored" in line and "from=0" in line
    topics = AdminClient(conf(clusters["target"])).list_topics(timeout=10).topics
    assert flow.remote_topic(topic_name) not in topics
    assert rows(StatePaths(flow.ferry.state_dir).gaps, flow.name) == []


@pytest.mark.spark
def test_a_backfill_copies_its_window_chunk_after_chunk(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    config = thirty_records(clusters, topic_name, tmp_path)
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


@pytest.mark.spark
@pytest.mark.parametrize(("delivery", "at"), [("exactly_once", "commit"),
                                              ("at_least_once", "positions")],
                         ids=["exactly-once-inside-its-transaction",
                              "at-least-once-after-reading-its-position"])
def test_a_cli_backfill_into_the_flows_topic_fences_a_scheduled_writer_caught_mid_run(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, connect_url: str,
    delivery: str, at: str
) -> None:
    # given: a flow at position 100 of 300, and a scheduled run's writer (tasks.max=2)
    # stopped at `at` on its way to copy 100..299
    from ferry.config import load_config
    from ferry.steps.plan import prepare
    from tests.support.kafka_data import assert_exact, paused_writer, run_cycle

    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(100)])
    flow = flow_config(tmp_path, clusters, topic_name,
                       f"tasks.max = 2\nferry.delivery = {delivery}\n").enabled_flows[0]
    assert run_cycle(flow, "start") == 100
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), 0) for i in range(100, 300)])
    scheduled = prepare(flow, run_id="scheduled")
    writer, _, release, failure = paused_writer(flow, list(scheduled.plan.ranges), "scheduled",
                                                at)

    # when: an operator backfills the flow's own topic from its position, from the command
    # line with a config of another lane count (tasks.max=8), then the scheduled run goes on
    eight = tmp_path / "eight.properties"
    eight.write_text((tmp_path / "mm2.properties").read_text().replace("tasks.max = 2",
                                                                       "tasks.max = 8"))
    assert load_config(eight).flow(flow.name).ferry.writers == flow.ferry.writers
    result = ferry("backfill", str(eight), "--flow", flow.name, "--from", "100",
                   "--master", connect_url, "--execute", "--json")
    release.set()
    writer.thread.join(60)  # type: ignore[attr-defined]

    # then: the backfill copied 100..299 under the partition's one writer id, which fenced
    # the scheduled writer: it stopped with one line, and every record is there once
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["job_exit_code"] == 0
    assert len(failure) == 1 and "was taken by a newer writer" in str(failure[0])
    assert "\n" not in str(failure[0])
    assert_exact(flow, clusters, topic_name, 1)
    assert run_cycle(flow, "after") == 0

"""`ferry_backfill`, triggered with the form's params and run by dag.test() against real
brokers, Spark and Delta: a time window into a topic of its own, chunk by chunk through
spark-submit; a refused overlap; a lost remote topic re-created and refilled through a
Spark Connect server, with the records retention took reported as a gap."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from tests.support.dags import run_dag
from tests.support.kafka_data import (
    conf,
    create_topic,
    flow_config,
    produce,
    read_all,
    run_cycle,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def contents(bootstrap: str, topic: str, partition: int) -> list[tuple[object, ...]]:
    return [r.content() for r in read_all(bootstrap, topic, partition)]


# the mapped chunks through spark-submit (`copy_chunk` on a `spark` connection); the
# refill below copies through the session's warm Spark Connect server
@pytest.mark.spark_submit
def test_a_time_window_goes_into_a_new_topic_chunk_by_chunk(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from ferry.core.tables import StatePaths
    from ferry.state.reader import rows

    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"old{i}".encode(), i % 2) for i in range(30)])
    time.sleep(1.1)
    produce(clusters["source"], topic_name, [(None, f"new{i}".encode(), i % 2) for i in range(36)])
    source = [r for p in range(2) for r in read_all(clusters["source"], topic_name, p)]
    first_new = min(r.timestamp for r in source if (r.value or b"").startswith(b"new"))
    since = datetime.fromtimestamp(first_new / 1000, UTC).isoformat(timespec="milliseconds")
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    window = f"investigation.{{topic}}.{topic_name[-6:]}"
    params = {"flow": flow.name, "topics": topic_name, "from": since, "to": "latest",
              "target_topic": window, "chunk_records": 10, "on_gap": "fail"}

    run = run_dag(config.path, "ferry_backfill", params)

    assert run["state"] == "success", run["log"][-4000:]
    chunks = run["mapped"]["copy_chunk"]
    assert [c["state"] for c in chunks] == ["success", "success"]  # 18 per partition, 10 a chunk
    assert chunks[0]["label"] == "chunk 1/2: " + topic_name + ", 2 partitions, 20 offsets"
    assert chunks[1]["label"] == "chunk 2/2: " + topic_name + ", 2 partitions, 16 offsets"
    destination = window.replace("{topic}", topic_name)
    for p in range(2):
        source = contents(clusters["source"], topic_name, p)
        assert contents(clusters["target"], destination, p) == source[15:]  # only the window
    assert flow.remote_topic(topic_name) not in AdminClient(
        conf(clusters["target"])).list_topics(timeout=10).topics  # the flow was not touched
    state = StatePaths(flow.ferry.state_dir)
    entries = [r for r in rows(state.offset_map, flow.name) if r["target_topic"] == destination]
    assert sum(r["records"] for r in entries) == 36
    assert {r["run_id"].rsplit(".", 1)[-1] for r in entries} == {"chunk-0001", "chunk-0002"}

    again = run_dag(config.path, "ferry_backfill", params | {"from": "15"})

    assert again["state"] == "failed"
    assert "offsets 15..32 are already there" in again["log"]
    assert "copy_chunk" not in again["mapped"]
    assert len(contents(clusters["target"], destination, 0)) == 18  # nothing written twice


def test_a_range_the_remote_topic_already_holds_is_refused(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(25)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    run_cycle(flow)
    produce(clusters["source"], topic_name, [(None, b"late", 0)] * 5)

    run = run_dag(config.path, "ferry_backfill", {
        "flow": flow.name, "topics": topic_name, "from": "10", "to": "latest",
        "target_topic": "", "chunk_records": 100, "on_gap": "fail"})

    assert run["state"] == "failed"
    assert run["tasks"]["plan"] == "failed"
    assert (f"{topic_name}-0 -> {flow.remote_topic(topic_name)}: offsets 10..24 are already "
            "there (run run). To proceed: start at 25 (from=25)") in run["log"], \
        run["log"][-3000:]
    assert len(read_all(clusters["target"], flow.remote_topic(topic_name), 0)) == 25


def test_a_lost_remote_topic_is_recreated_and_refilled_with_the_retention_gap_reported(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from ferry.core.tables import StatePaths
    from ferry.state.reader import rows
    from ferry.steps.lookup import find

    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(60)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    run_cycle(flow)
    remote = flow.remote_topic(topic_name)
    source_admin, target_admin = (AdminClient(conf(clusters[side]))
                                  for side in ("source", "target"))
    target_admin.delete_topics([remote])[remote].result(30)  # lost
    for future in source_admin.delete_records([KTP(topic_name, 0, 10)]).values():
        future.result(30)  # retention took offsets 0..9 of partition 0 meanwhile
    deadline = time.monotonic() + 30
    while remote in target_admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.5)

    run = run_dag(config.path, "ferry_backfill", {
        "flow": flow.name, "topics": topic_name, "from": "earliest", "to": "latest",
        "target_topic": "", "chunk_records": 1000, "on_gap": "continue"})

    assert run["state"] == "success", run["log"][-4000:]
    assert [c["state"] for c in run["mapped"]["copy_chunk"]] == ["success"]
    # a `spark_connect` connection: the chunk ran in its task's process on the warm server
    assert "on the Spark Connect server sc://" in run["log"]
    assert "SparkSubmit" not in run["log"] and "spark-submit" not in run["log"]
    source = [contents(clusters["source"], topic_name, p) for p in range(2)]
    assert len(source[0]) == 20 and len(source[1]) == 30
    for p in range(2):
        assert contents(clusters["target"], remote, p) == source[p]
    gaps = rows(StatePaths(flow.ferry.state_dir).gaps, flow.name)
    assert [(g["topic"], g["partition"], g["gap_start"], g["gap_end"], g["action"])
            for g in gaps] == [(topic_name, 0, 0, 10, "continue")]
    assert "offsets 0..9 (10 records) were deleted by retention" in run["log"]
    answer = find(flow, topic_name, 0, 12)  # the refill's entry, not the lost topic's
    assert (answer.status, answer.target_offset) == ("mirrored", 2)  # 10 went to 0
    produce(clusters["source"], topic_name, [(None, b"after", 1)] * 3)
    assert run_cycle(flow, run_id="after") == 3  # the flow goes on from the refill's end
    assert contents(clusters["target"], remote, 1) == contents(clusters["source"], topic_name, 1)

"""`ferry mirror`, `ferry plan` and `ferry offsets` on real brokers, Spark and Delta:
the spark-submit path, retention gaps (G6), a recreated source topic, partition growth."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from ferry.core.planner import TopicPartition as TopicPartition_
from ferry.core.tables import StatePaths
from ferry.errors import TerminalError
from ferry.state.reader import rows
from ferry.steps.cycle import plans_dir
from ferry.steps.plan import prepare
from tests.support.cli import ferry
from tests.support.kafka_data import (
    assert_exact,
    create_topic,
    flow_config,
    grow_topic,
    produce,
    read_all,
    recreate_topic,
    run_cycle,
)

pytestmark = pytest.mark.integration




def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(result.stdout)


@pytest.mark.spark
def test_mirror_cli_copies_records_and_offsets_finds_them(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), i % 2)
                                             for i in range(400)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]

    mirrored = ferry("mirror", config.path, "--flow", flow.name, "--json")

    assert mirrored.returncode == 0, mirrored.stderr[-3000:]
    assert as_json(mirrored)["idle"] is False
    assert_exact(flow, clusters, topic_name, 2)
    target = read_all(clusters["target"], flow.remote_topic(topic_name), 1)
    found = as_json(ferry("offsets", config.path, "--flow", flow.name, "--topic", topic_name,
                          "--partition", "1", "--source-offset", "150", "--json"))
    assert found["status"] == "mirrored"
    assert target[[r.offset for r in target].index(found["target_offset"])].value == b"v301"
    again = ferry("mirror", config.path, "--flow", flow.name, "--json")
    assert again.returncode == 0 and as_json(again)["idle"] is True


@pytest.mark.spark
@pytest.mark.spark_submit
def test_later_spark_submit_jobs_start_from_the_class_data_archive_the_first_one_left(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a cache without a class-data archive (the jars the setup fetched)
    from ferry.jars import cache_dir

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "jars").symlink_to(cache_dir() / "jars", target_is_directory=True)
    monkeypatch.setenv("FERRY_CACHE_DIR", str(cache))
    create_topic(clusters["source"], topic_name, 2)
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(200)])

    # when: a first job, then a second whose JVMs refuse to start without their archive
    first = ferry("mirror", config.path, "--flow", flow.name, "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    archives = sorted(p.name for p in (cache / "classdata").iterdir())
    produce(clusters["source"], topic_name, [(None, f"w{i}".encode(), i % 2) for i in range(200)])
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xshare:on")
    second = ferry("mirror", config.path, "--flow", flow.name, "--json")

    # then: the first job's archive was adopted, and the second job's driver mapped it
    # (-Xshare:on: "Unable to use shared archive" would have stopped it); records exact
    assert len(archives) == 1 and archives[0].endswith(".jsa"), archives
    assert second.returncode == 0, second.stderr[-3000:]
    assert as_json(second)["steps"]["record"]["records"] == 200
    assert sorted(p.name for p in (cache / "classdata").iterdir()) == archives
    assert_exact(flow, clusters, topic_name, 2)


def test_ferry_mirror_runs_the_dags_steps_heartbeat_to_checkpoints_in_one_process(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a topic with records and a consumer group on the source that read 150 of them
    from ferry.core.heartbeats import decode as heartbeat
    from tests.support.failover import commit_source, read_checkpoints

    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(300)])
    group = f"{topic_name}-app"
    commit_source(clusters["source"], group, topic_name, {0: 150})
    config = flow_config(tmp_path, clusters, topic_name, "emit.heartbeats.enabled = true\n"
                         "heartbeats.topic.replication.factor = 1\n")
    flow = config.enabled_flows[0]

    # when: one `ferry mirror` (as cron would run it)
    mirrored = ferry("mirror", config.path, "--flow", flow.name, "--json")

    # then: every step of the DAG ran, in the DAG's order, with what each step did
    assert mirrored.returncode == 0, mirrored.stderr[-3000:]
    steps = as_json(mirrored)["steps"]
    assert list(steps) == ["heartbeat", "sync", "plan", "copy", "record", "checkpoints"]
    assert steps["heartbeat"] == [f"{flow.source}->{flow.target}"]
    assert steps["copy"] == {"exit_code": 0}
    assert (steps["record"]["records"], steps["record"]["failed"]) == (300, [])
    # as the spark-submit job left it beside its plan (read, then removed), not read back
    assert "run recorded (by its job)" in mirrored.stderr
    assert not list(plans_dir(flow).glob("*.result.json"))
    assert steps["checkpoints"]["ran"] is True
    # a heartbeat on the target (what MM2's upstreamClusters reads), and the group's
    # checkpoint, translated exactly
    beats = [b for r in read_all(clusters["target"], flow.policy.heartbeats_topic(), 0)
             if (b := heartbeat(r.key, r.value)) is not None]
    assert any((b.source, b.target) == (flow.source, flow.target) for b in beats)
    assert (group, 150, 150) in read_checkpoints(clusters, flow)
    assert_exact(flow, clusters, topic_name, 1)


def test_one_command_runs_every_flow_and_the_heartbeats_of_pairs_without_one_as_mm2_does(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a config as connect-mirror-maker.sh takes it: A->B mirrors a topic, B->A
    # mirrors nothing, and heartbeats are on (MM2's defaults); no Airflow anywhere
    from ferry.jars import kafka_jars, log4j_config

    tag = os.urandom(3).hex()
    a, b = f"a{tag}", f"b{tag}"
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), 0) for i in range(50)])
    path = tmp_path / "mm2.properties"
    path.write_text(
        f"clusters = {a}, {b}\n{a}.bootstrap.servers = {clusters['source']}\n"
        f"{b}.bootstrap.servers = {clusters['target']}\n"
        f"{a}->{b}.enabled = true\n{a}->{b}.topics = {topic_name}\n"
        "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
        f"heartbeats.topic.replication.factor = 1\nferry.state.dir = {tmp_path / 'state'}\n")

    # when: one `ferry mirror` naming no flow (as a cron job or a systemd unit would run it)
    done = ferry("mirror", str(path), "--json")

    # then: B->A's heartbeat was written on A, then the flow copied the topic and A's
    # heartbeats to B
    assert done.returncode == 0, done.stderr[-3000:]
    report = as_json(done)
    assert report["heartbeats"] == [f"{b}->{a}"]
    assert [(f["flow"], f["ok"]) for f in report["flows"]] == [(f"{a}->{b}", True)]
    assert len(read_all(clusters["target"], f"{a}.{topic_name}", 0)) == 50
    # and MM2's own client on B finds A upstream, one hop away, through them
    java = subprocess.run(
        ["java", f"-Dlog4j2.configurationFile={log4j_config()}", "-cp", f"{kafka_jars()}/*",
         str(Path(__file__).parent / "java" / "MirrorTopology.java"), clusters["target"]],
        capture_output=True, text=True, timeout=180, check=False)
    assert java.returncode == 0, java.stderr[-3000:]
    assert f"UPSTREAM {a} 1" in java.stdout.splitlines(), java.stdout


@pytest.mark.spark
def test_state_lost_after_the_kafka_commit_is_rebuilt_from_the_target(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(b"k", f"a{i}".encode(), 0) for i in range(50)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    # given a run whose records and entries the target committed, but nothing in Delta
    # (the in-process cycle writes no Delta rows: as if the job died right after the commit)
    run_cycle(flow, "lost-state")
    produce(clusters["source"], topic_name, [(b"k", f"b{i}".encode(), 0) for i in range(5)])

    # when the next job runs
    assert ferry("mirror", config.path, "--flow", flow.name).returncode == 0

    # then both runs are in Delta: the lost one rebuilt from the offset-map topic, with the
    # times its lane reported (its entries carry them), so as the lane's own row
    state = StatePaths(flow.ferry.state_dir)
    runs = {r["run_id"]: r for r in rows(state.runs, flow.name)}
    assert runs["lost-state"]["records"] == 50
    assert runs["lost-state"]["bytes"] == sum(1 + len(f"a{i}") for i in range(50))
    assert runs["lost-state"]["max_record_age_ms"] > 0 and runs["lost-state"]["seconds"] > 0
    assert runs["lost-state"]["error"] == ""
    assert sum(r["records"] for r in rows(state.offset_map, flow.name, source_topic=topic_name)) \
        == 55


@pytest.mark.spark
def test_records_lost_to_retention_are_a_recorded_gap_that_fails_the_run(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(b"k", f"a{i}".encode(), 0) for i in range(100)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    run_cycle(flow)
    produce(clusters["source"], topic_name, [(b"k", f"b{i}".encode(), 0) for i in range(100)])
    admin = AdminClient({"bootstrap.servers": clusters["source"]})
    for future in admin.delete_records([TopicPartition(topic_name, 0, 150)]).values():
        future.result(30)  # retention (here: DeleteRecords) removes [100, 150) unmirrored

    plan = as_json(ferry("plan", config.path, "--flow", flow.name, "--json"))
    assert plan["gaps"] == [{"topic": topic_name, "partition": 0, "start": 100, "end": 150,
                             "count": 50}]
    failed = ferry("mirror", config.path, "--flow", flow.name)
    assert failed.returncode == 1
    assert f"{topic_name}-0 offsets 100..149 (50 records)" in failed.stderr
    gaps = rows(StatePaths(flow.ferry.state_dir).gaps, flow.name)
    assert [(g["gap_start"], g["gap_end"], g["records"], g["action"]) for g in gaps] == [
        (100, 150, 50, "fail")]
    assert len(read_all(clusters["target"], flow.remote_topic(topic_name), 0)) == 100

    # the operator accepts the loss: copying goes on from the oldest record left
    config = flow_config(tmp_path, clusters, topic_name, "ferry.on.gap = continue\n")
    resumed = ferry("mirror", config.path, "--flow", flow.name)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    values = [r.value for r in read_all(clusters["target"], flow.remote_topic(topic_name), 0)]
    assert values == [f"a{i}".encode() for i in range(100)] + \
        [f"b{i}".encode() for i in range(50, 100)]
    lost = as_json(ferry("offsets", config.path, "--flow", flow.name, "--topic", topic_name,
                         "--partition", "0", "--source-offset", "120", "--json"))
    assert (lost["status"], lost["next_source"], lost["next_target"]) == ("no-record", 150, 101)


def test_a_recreated_source_topic_is_an_error_not_a_guess(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(b"k", b"v", 0)] * 20)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow)
    recreate_topic(clusters["source"], topic_name)
    produce(clusters["source"], topic_name, [(b"k", b"v", 0)] * 3)

    with pytest.raises(TerminalError, match=f"source topic {topic_name} was deleted and "
                                            "created again"):
        prepare(flow, apply=False)

    # the operator keeps the remote topic and resets the positions, as the message says
    config = str(tmp_path / "mm2.properties")
    dry = as_json(ferry("positions", "reset", config, "--flow", flow.name, "--topic",
                        topic_name, "--to", "earliest", "--dry-run", "--json"))
    assert dry["positions"] == [{"topic": topic_name, "partition": 0, "before": 20, "after": 0}]
    done = ferry("positions", "reset", config, "--flow", flow.name, "--topic", topic_name,
                 "--to", "earliest", "--execute")
    assert done.returncode == 0 and done.stdout.strip() == f"reset {topic_name}-0: 20 -> 0"
    run_cycle(flow, "after-reset")
    remote = flow.remote_topic(topic_name)
    assert len(read_all(clusters["target"], remote, 0)) == 23  # 20 old, then the 3 new
    found = as_json(ferry("offsets", config, "--flow", flow.name, "--topic", topic_name,
                          "--partition", "0", "--source-offset", "1", "--json"))
    assert found["status"] == "mirrored" and found["target_offset"] > 20  # the new record


def test_deleting_the_remote_topic_also_drops_its_positions(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(b"k", b"v", 0)] * 5)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow)
    target = AdminClient({"bootstrap.servers": clusters["target"]})
    remote = flow.remote_topic(topic_name)
    target.delete_topics([remote])[remote].result(30)
    deadline = time.monotonic() + 30
    while remote in target.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    # the group coordinator drops a deleted topic's committed offsets after the topic
    # leaves the metadata, asynchronously (a loaded CI machine read them once in between)
    positions = prepare(flow, apply=False).positions
    while positions != {TopicPartition_(topic_name, 0): None}:  # a new partition to the plan
        assert time.monotonic() < deadline, positions
        time.sleep(0.5)
        positions = prepare(flow, apply=False).positions


def test_partition_growth_is_mirrored_before_its_data_and_records_keep_partitions(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(b"k", f"p{i % 2}".encode(), i % 2)
                                             for i in range(40)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow)
    grow_topic(clusters["source"], topic_name, 5)
    produce(clusters["source"], topic_name, [(b"k", f"p{i % 5}".encode(), i % 5)
                                             for i in range(50)])

    prepared = prepare(flow, apply=False)
    assert [(g.name, g.from_partitions, g.to_partitions) for g in prepared.topology.grow] == [
        (flow.remote_topic(topic_name), 2, 5)]
    run_cycle(flow, "grown")

    target = AdminClient({"bootstrap.servers": clusters["target"]}).list_topics(timeout=10)
    assert len(target.topics[flow.remote_topic(topic_name)].partitions) == 5
    for p in range(5):
        values = {r.value for r in read_all(clusters["target"], flow.remote_topic(topic_name), p)}
        assert values == {f"p{p}".encode()}
    assert_exact(flow, clusters, topic_name, 5)

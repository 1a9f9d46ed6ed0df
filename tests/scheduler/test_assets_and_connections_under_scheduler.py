"""Assets and connections under a real Airflow scheduler (`tests.scheduler.stack`: the
scheduler, dag-processor and api-server, not dag.test()), against real brokers, Spark and
Delta. One Airflow for the module, with two manual-only flows (`ferry.schedule = none`):

- `assets`: plain clusters. Two DAGs wait downstream of it, written as docs/airflow.md
  shows: one on its topic's Asset (`remote_topic_asset`), one on its AssetAlias
  (`flow_alias`). The scheduler itself must start them after a run that copied records.
- `connected`: from the secure source to the secure target (SASL_SSL), with no client
  setting in the config, only `<alias>.ferry.connection`: the source's connection is an
  `AIRFLOW_CONN_<ID>` variable in every component's environment (the Kafka provider's JSON
  form), the target's is created through the REST API (Ferry's `ferry_kafka` type, stored
  in the metadata DB) by its test, after Airflow is up, so its DAG files were parsed
  without it, and the `assets` flow ran before it existed: a flow's tasks look up only the
  connections of its own two clusters.

`ferry_failover` (from the same DAG file) moves the `assets` flow's consumer groups, as an
operator triggers it with a form's conf: refused to execute while the flow's DAG has a run
in progress (which only a scheduler running both DAGs can show), a dry run otherwise.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from ferry.airflow.failover_dag import FAILOVER_DAG
from ferry.config import MirrorConfig, load_config
from ferry.config.connections import SNAPSHOT_SUFFIX
from ferry.local.cluster import SecureClusters
from ferry.steps.cycle import plans_dir
from tests.integration.kafka_data import create_topic, produce, read_all
from tests.integration.secure_data import SOURCE, TARGET, grant_mirror_rights
from tests.integration.test_exactness import stable_and_end
from tests.integration.test_failover import commit_source
from tests.integration.test_failover_operation import target_offsets
from tests.integration.test_lane import assert_exact
from tests.scheduler.conftest import FlowUnderTest
from tests.scheduler.stack import Airflow, TaskTry, keep_logs, running, wait_for

pytestmark = pytest.mark.integration

RUN_S = 360
"""The longest a run may take here: a spark-submit copy (and a retry) on a small machine
shared with other test runs."""

DOWNSTREAM_S = 180
"""The longest the scheduler may take to start a downstream run and finish it."""

ON_TOPIC, ON_FLOW = "report_on_mirrored_topic", "report_on_mirrored_flow"

DOWNSTREAM_DAGS = {
    "on_topic.py": '''"""Runs when Ferry mirrored new records of one topic, and reports them."""
from airflow.sdk import DAG, get_current_context, task

from ferry.airflow.assets import remote_topic_asset

ORDERS = remote_topic_asset({flow!r}, {topic!r})

with DAG({dag_id!r}, schedule=[ORDERS], catchup=False):

    @task(inlets=[ORDERS])
    def report() -> dict:
        return dict(get_current_context()["inlet_events"][ORDERS][-1].extra)

    report()
''',
    "on_flow.py": '''"""Runs when Ferry mirrored new records of one flow, and reports them."""
from airflow.sdk import DAG, get_current_context, task

from ferry.airflow.assets import flow_alias

MIRRORED = flow_alias({flow!r})

with DAG({dag_id!r}, schedule=[MIRRORED], catchup=False):

    @task
    def report() -> list:
        events = get_current_context()["triggering_asset_events"][MIRRORED]
        return [[event.asset.uri, dict(event.extra)] for event in events]

    report()
''',
}


class Scheduler(Airflow):
    """The module's Airflow, and its two flows."""

    def __init__(self, airflow: Airflow, config: MirrorConfig, assets: FlowUnderTest,
                 connected: FlowUnderTest, tag: str) -> None:
        super().__init__(airflow.url)
        self.config = config
        """FERRY_CONFIG as the DAG file reads it (no connection looked up)."""
        self.assets = assets
        self.connected = connected
        self.target_connection = f"kafka_target_{tag}"
        """The id of the `connected` flow's target connection (created by its test)."""

    def trigger_with(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Unpause the DAG and trigger a run of it now with `conf` (its trigger form's
        values); its run id."""
        self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        return str(run["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"])

    def asset_events(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The Asset events a run of `dag_id` added."""
        return list(self.api("GET", "/assets/events", source_dag_id=dag_id,
                             source_run_id=run_id)["asset_events"])

    def xcom_texts(self, dag_id: str, run_id: str) -> dict[tuple[str, str], str]:
        """(task id, key) -> every XCom of the run, as the REST API shows it."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
        found = self.api("GET", f"{path}/~/xcomEntries")["xcom_entries"]
        return {(e["task_id"], e["key"]): json.dumps(self.api(
                    "GET", f"{path}/{e['task_id']}/xcomEntries/{e['key']}")["value"])
                for e in found}


def _config(base: Path, clusters: dict[str, str],
            tag: str) -> tuple[MirrorConfig, FlowUnderTest, FlowUnderTest]:
    """The two flows' config (aliases and topics unique to this module: the brokers are
    shared). `connected`'s clusters name connections only."""
    assets, connected = (f"src_a{tag}", f"tgt_a{tag}"), (f"src_c{tag}", f"tgt_c{tag}")
    topics = {assets: f"sched-assets-{tag}", connected: f"sched-connections-{tag}"}
    lines = [f"clusters = {', '.join(assets + connected)}",
             f"{assets[0]}.bootstrap.servers = {clusters['source']}",
             f"{assets[1]}.bootstrap.servers = {clusters['target']}",
             f"{connected[0]}.ferry.connection = kafka_source_{tag}",
             f"{connected[1]}.ferry.connection = kafka_target_{tag}"]
    for source, target in (assets, connected):
        lines += [f"{source}->{target}.enabled = true",
                  f"{source}->{target}.topics = {topics[(source, target)]}"]
    lines += ["ferry.schedule = none", "replication.factor = 1",
              "checkpoints.topic.replication.factor = 1", "emit.heartbeats.enabled = false",
              "heartbeats.replication.enabled = false", f"ferry.state.dir = {base / 'state'}"]
    path = base / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")
    # as the DAG file reads it: the connections are not looked up here (the test process
    # has neither of them)
    config = load_config(path, connections=False)
    return (config, FlowUnderTest(config.flow("->".join(assets)), topics[assets]),
            FlowUnderTest(config.flow("->".join(connected)), topics[connected]))


def _target_connection(sc: SecureClusters, conn_id: str) -> dict[str, Any]:
    """The secure target as a connection of Ferry's `ferry_kafka` type, a body for the REST
    API's POST /connections: bootstrap servers as its host, `ferry`'s SASL username and
    password as its login and password, the rest of the client settings in its extra."""
    return {"connection_id": conn_id, "conn_type": "ferry_kafka",
            "host": sc.bootstrap[TARGET], "login": "ferry", "password": sc.passwords["ferry"],
            "extra": json.dumps({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                 "ssl.ca.location": str(sc.ca)})}


def _source_connection(sc: SecureClusters) -> str:
    """The secure source as the Kafka provider's connection, in Airflow's JSON form: a
    librdkafka client config in its extra (SCRAM-SHA-512 over SASL_SSL, as `ferry`)."""
    return json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": sc.bootstrap[SOURCE], "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ferry",
        "sasl.password": sc.passwords["ferry"], "ssl.ca.location": str(sc.ca)}})


@pytest.fixture(scope="module")
def scheduler(clusters: dict[str, str], secure_clusters: SecureClusters,
              tmp_path_factory: pytest.TempPathFactory,
              request: pytest.FixtureRequest) -> Iterator[Scheduler]:
    base = tmp_path_factory.mktemp("scheduler-assets")
    tag = uuid.uuid4().hex[:6]
    config, assets, connected = _config(base, clusters, tag)
    downstream = {name: source.format(flow=assets.flow.name, topic=assets.topic, dag_id=dag_id)
                  for (name, source), dag_id in zip(DOWNSTREAM_DAGS.items(),
                                                    (ON_TOPIC, ON_FLOW), strict=True)}
    environment = {f"AIRFLOW_CONN_KAFKA_SOURCE_{tag.upper()}": _source_connection(
        secure_clusters)}
    failures = request.session.testsfailed
    passed = False
    try:
        with running(base, base / "mm2.properties",
                     (assets.dag_id, connected.dag_id, FAILOVER_DAG, ON_TOPIC, ON_FLOW),
                     extra_env=environment, dag_files=downstream) as (airflow, _):
            yield Scheduler(airflow, config, assets, connected, tag)
            passed = request.session.testsfailed == failures
    finally:
        if not passed:
            keep_logs(base / "airflow", request.module.__name__.rsplit(".", 1)[-1])


def test_a_run_that_copied_records_makes_the_scheduler_run_the_dags_downstream_of_its_topic(
    scheduler: Scheduler, clusters: dict[str, str]
) -> None:
    # given: 120 records in two partitions of the flow's topic, and the two downstream DAGs
    # (on the remote topic's Asset, on the flow's alias) unpaused, since Airflow queues only
    # DAGs that are not; the other flow's target connection does not exist (yet), which
    # concerns that flow's tasks only
    flow = scheduler.assets
    connections = scheduler.api("GET", "/connections")["connections"]
    assert scheduler.target_connection not in [c["connection_id"] for c in connections]
    create_topic(clusters["source"], flow.topic, 2)
    produce(clusters["source"], flow.topic,
            [(f"k{i}".encode(), f"v{i}".encode(), i % 2) for i in range(120)])
    for dag_id in (ON_TOPIC, ON_FLOW):
        scheduler.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})

    # when: the scheduler runs the flow's DAG
    run_id = scheduler.trigger(flow.dag_id)
    state = scheduler.finished(flow.dag_id, run_id, RUN_S)

    # then: the scheduler started each downstream DAG once, for the run's Asset event, and
    # it succeeded
    assert state == "success", scheduler.tasks(flow.dag_id, run_id)
    for dag_id in (ON_TOPIC, ON_FLOW):
        (run,) = wait_for(f"the scheduler to start {dag_id}", DOWNSTREAM_S,
                          lambda dag_id=dag_id: scheduler.runs(dag_id) or None)
        assert run["run_type"] == "asset_triggered", run
        assert scheduler.finished(dag_id, run["dag_run_id"], DOWNSTREAM_S) == "success", (
            scheduler.tasks(dag_id, run["dag_run_id"]))
    # (Events are read once the runs they created have started: Airflow 3.3's API answers
    # 500 for an event that created a run still queued, whose start_date it requires.)
    (event,) = scheduler.asset_events(flow.dag_id, run_id)
    assert sorted(r["dag_id"] for r in event["created_dagruns"]) == sorted((ON_FLOW, ON_TOPIC))
    for dag_id in (ON_TOPIC, ON_FLOW):
        (run,) = scheduler.runs(dag_id)
        consumed = scheduler.api(
            "GET", f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}/upstreamAssetEvents")
        assert [e["id"] for e in consumed["asset_events"]] == [event["id"]], consumed
    # and that event is the remote topic's Asset, saying what the run copied
    uri = f"kafka://{clusters['target']}/{flow.flow.remote_topic(flow.topic)}"
    assert event["uri"] == uri
    mirrored = {"flow": flow.flow.name, "run_id": event["extra"]["run_id"],
                "source_topic": flow.topic, "records": 120,
                "partitions": {"0": [0, 60], "1": [0, 60]}}
    assert event["extra"] == mirrored
    # and each downstream DAG read it
    (topic_run,), (flow_run,) = scheduler.runs(ON_TOPIC), scheduler.runs(ON_FLOW)
    assert scheduler.xcom(ON_TOPIC, topic_run["dag_run_id"], "report") == mirrored
    assert scheduler.xcom(ON_FLOW, flow_run["dag_run_id"], "report") == [[uri, mirrored]]


def test_a_flow_whose_clusters_live_in_airflow_connections_copies_exactly_under_the_scheduler(
    scheduler: Scheduler, secure_clusters: SecureClusters
) -> None:
    # given: a flow between the secure clusters whose config names only connections (no
    # bootstrap servers, no credentials): the source's in every component's environment,
    # the target's created through the REST API once Airflow is up, its DAG files parsed
    sc, flow = secure_clusters, scheduler.connected
    assert {scheduler.config.clusters[alias].bootstrap_servers
            for alias in (flow.flow.source, flow.flow.target)} == {""}
    target = scheduler.config.clusters[flow.flow.target].connection
    assert target == scheduler.target_connection
    scheduler.api("POST", "/connections", _target_connection(sc, target))
    assert scheduler.api("GET", f"/connections/{target}")["host"] == sc.bootstrap[TARGET]
    # and 300 records on its source, and the rights an operator gives the mirror principal
    conns = {"source": sc.client(SOURCE), "target": sc.client(TARGET)}
    create_topic(conns["source"], flow.topic, 2, {"retention.ms": "86400000"})
    produce(conns["source"], flow.topic, [(None, f"v{i}".encode(), i % 2) for i in range(300)])
    grant_mirror_rights(sc, flow.flow, flow.topic)

    # when: the scheduler runs the flow's DAG
    run_id = scheduler.trigger(flow.dag_id)
    state = scheduler.finished(flow.dag_id, run_id, RUN_S)

    # then: it succeeded, its copy run by spark-submit's job, which knows the target only
    # from the snapshot of the connections the task left beside its plan (gone now)
    tasks = scheduler.tasks(flow.dag_id, run_id)
    assert state == "success", tasks
    assert {task_id: t.state for task_id, t in tasks.items()} == {
        "cycle": "success", "mirror": "success", "finish": "success"}
    assert not list(plans_dir(flow.flow).glob("*" + SNAPSHOT_SUFFIX))
    # and the remote topic holds every record once, in order, as the offset map says
    assert_exact(flow.flow, conns, flow.topic, 2)
    # and its Asset is named by the target's bootstrap servers as the connection gives them
    (event,) = scheduler.asset_events(flow.dag_id, run_id)
    assert event["uri"] == f"kafka://{sc.bootstrap[TARGET]}/{flow.flow.remote_topic(flow.topic)}"
    assert event["extra"]["records"] == 300
    # and the password reached no task log and no XCom
    password = sc.passwords["ferry"]
    for task_id, attempt in tasks.items():
        log = scheduler.task_log(flow.dag_id, run_id, task_id, attempt.try_number)
        assert log and password not in log, f"the password is in {task_id}'s log"
    xcoms = scheduler.xcom_texts(flow.dag_id, run_id)
    assert ("cycle", "plan") in xcoms and ("finish", "return_value") in xcoms, xcoms
    assert [where for where, text in xcoms.items() if password in text] == []


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> the end (high watermark) of the topic's partition."""
    return {p: stable_and_end(bootstrap, TopicPartition(topic, p))[1]
            for p in range(partitions)}


def test_a_planned_failover_is_refused_while_the_flow_runs_and_its_dry_run_shows_the_exact_offsets(
    scheduler: Scheduler, clusters: dict[str, str]
) -> None:
    # given: the `assets` flow's topic (created unless an earlier test did) with 200 more
    # records not mirrored yet, and a consumer group that committed on the source in the
    # middle of partition 0 and at the end of partition 1; the DAGs downstream of the flow
    # paused (another test's concern)
    flow, group = scheduler.assets, f"{scheduler.assets.topic}-billing"
    if flow.topic not in AdminClient({"bootstrap.servers": clusters["source"]}).list_topics(
            timeout=30).topics:
        create_topic(clusters["source"], flow.topic, 2)
    produce(clusters["source"], flow.topic,
            [(f"f{i}".encode(), f"w{i}".encode(), i % 2) for i in range(200)])
    ends = _ends(clusters["source"], flow.topic, 2)
    offsets = {0: ends[0] - 70, 1: ends[1]}
    commit_source(clusters["source"], group, flow.topic, offsets)
    for dag_id in (ON_TOPIC, ON_FLOW):
        scheduler.api("PATCH", f"/dags/{dag_id}", {"is_paused": True})
    form = {"flow": flow.flow.name, "mode": "planned", "groups": f"{flow.topic}-bill.*"}

    # when: the operator triggers the flow's DAG (its copy is a spark-submit: tens of
    # seconds) and at once an executed planned failover of that flow
    flow_run = scheduler.trigger(flow.dag_id)
    refused = scheduler.trigger_with(FAILOVER_DAG, form | {"execute": True})
    in_progress = scheduler.run_state(flow.dag_id, flow_run)

    # then: the failover failed, its one try saying which DAG has a run in progress, while
    # that run was still queued or running: it checked the flow's run, not an ended one
    assert in_progress in ("queued", "running"), in_progress
    assert scheduler.finished(FAILOVER_DAG, refused, RUN_S) == "failed", (
        scheduler.tasks(FAILOVER_DAG, refused))
    assert scheduler.tasks(FAILOVER_DAG, refused) == {"failover": TaskTry("failed", 1)}
    log = scheduler.task_log(FAILOVER_DAG, refused, "failover", 1)
    assert f"DAG {flow.dag_id} has a run in progress" in log, log[-4000:]
    refused_at = scheduler.api(
        "GET", f"/dags/{FAILOVER_DAG}/dagRuns/{refused}/taskInstances/failover")["end_date"]
    # and the flow's run went on and succeeded, after the refusal
    assert scheduler.finished(flow.dag_id, flow_run, RUN_S) == "success", (
        scheduler.tasks(flow.dag_id, flow_run))
    flow_end = scheduler.api("GET", f"/dags/{flow.dag_id}/dagRuns/{flow_run}")["end_date"]
    assert datetime.fromisoformat(refused_at) < datetime.fromisoformat(flow_end), (
        refused_at, flow_end)

    # when: with the flow's run over, the operator triggers the planned failover with the
    # form's default, a dry run
    shown = scheduler.trigger_with(FAILOVER_DAG, form)

    # then: it succeeded, and its report (the task's XCom) shows each of the group's
    # partitions translated exactly to the remote topic, to be committed there, without a
    # catch-up cycle, a stored report or a fail-back flow
    assert scheduler.finished(FAILOVER_DAG, shown, RUN_S) == "success", (
        scheduler.tasks(FAILOVER_DAG, shown))
    report = scheduler.xcom(FAILOVER_DAG, shown, "failover")
    remote = flow.flow.remote_topic(flow.topic)
    assert {k: report[k] for k in ("flow", "mode", "executed", "cycles", "at_risk",
                                   "report")} == {
        "flow": flow.flow.name, "mode": "planned", "executed": False, "cycles": 0,
        "at_risk": [], "report": None}
    lines = report["groups"]
    assert [(g["group"], g["topic"], g["partition"], g["source_offset"], g["target_topic"],
             g["status"], g["outcome"]) for g in lines] == [
        (group, flow.topic, p, offset, remote, "exact", "would-commit")
        for p, offset in sorted(offsets.items())], lines
    assert report["reverse"]["configured"] is False, report["reverse"]
    # and from each target offset, the group would read on the remote topic exactly the
    # records it has not read on the source (none twice, none skipped)
    remote_ends = _ends(clusters["target"], remote, 2)
    for line in lines:
        p, at = line["partition"], line["target_offset"]
        unread = [r.content() for r in read_all(clusters["source"], flow.topic, p)
                  if r.offset >= offsets[p]]
        there = [r.content() for r in read_all(clusters["target"], remote, p) if r.offset >= at]
        assert at <= remote_ends[p] and there == unread, (line, remote_ends)
    # and its log says the source is drained (the flow caught up), and what it would do
    log = scheduler.task_log(FAILOVER_DAG, shown, "failover", 1)
    assert "the flow is caught up" in log, log[-4000:]
    assert (f"{group}: {flow.topic}-0@{offsets[0]} -> {remote}-0@{lines[0]['target_offset']} "
            "exact, would-commit") in log, log[-4000:]
    # and neither failover changed anything: the group committed nothing on the target,
    # and no report was stored under the state dir
    assert target_offsets(clusters["target"], group, remote, 2) == {}
    assert not (Path(flow.flow.ferry.state_dir) / "failover").exists()

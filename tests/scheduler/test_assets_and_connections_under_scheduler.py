"""Assets, connections and the operations DAGs under a real Airflow scheduler
(`tests.scheduler.stack`: the scheduler, dag-processor and api-server, not dag.test()),
against real brokers, Spark and Delta, on the tier's Airflow (`conftest.py`), through four
manual-only flows of its config (`ferry.schedule = none`) that only this module uses:

- `assets`: plain clusters. Two DAGs wait downstream of it (`conftest.DOWNSTREAM_DAGS`),
  written as docs/airflow.md shows: one on its topic's Asset (`remote_topic_asset`), one on
  its AssetAlias (`flow_alias`). The scheduler itself must start them after a run that
  copied records.
- `connected`: from the secure source to the secure target (SASL_SSL), with no client
  setting in the config, only `<alias>.ferry.connection`: the source's connection is an
  `AIRFLOW_CONN_<ID>` variable in every component's environment (the Kafka provider's JSON
  form), the target's is created through the REST API (Ferry's `ferry_kafka` type, stored
  in the metadata DB) by its test, after Airflow is up, so its DAG files were parsed
  without it, and the `assets` flow ran before it existed: a flow's tasks look up only the
  connections of its own two clusters.
- `adopted`: plain clusters; an MM1-style mirror copied part of its topic before Ferry
  takes over with `ferry_adopt`, then the flow's DAG continues.
- `differ`: plain clusters; its remote topic has fewer partitions than its source topic,
  so `ferry_adopt` cannot adopt it.

`ferry_failover` and `ferry_adopt` (from the same DAG file) run as an operator triggers them
with a form's conf. Both refuse to execute while the flow's DAG has a run in progress, which
only a scheduler running the DAGs side by side can show.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ferry.airflow.adopt_dag import ADOPT_DAG
from ferry.airflow.failover_dag import FAILOVER_DAG
from ferry.config.connections import SNAPSHOT_SUFFIX
from ferry.local.cluster import SecureClusters
from ferry.steps.cycle import plans_dir
from tests.scheduler.stack import Airflow, TaskTry, wait_for
from tests.support.airflow_stack import ON_FLOW, ON_TOPIC, Stack
from tests.support.failover import commit_source
from tests.support.groups import commit_group, positions, target_offsets
from tests.support.kafka_data import assert_exact, create_topic, produce, read_all, stable_and_end
from tests.support.secure_data import SOURCE, TARGET, grant_mirror_rights

pytestmark = pytest.mark.integration

RUN_S = 600
"""The longest a run may take here: a spark-submit copy (and a retry) on a small machine
shared with other test runs (on CI's, one copy took five minutes to start its lanes, and
its test failed at the 360 s this was). The module's tests have `conftest.LONG_TIMEOUT_S`."""

DOWNSTREAM_S = 180
"""The longest the scheduler may take to start a downstream run and finish it."""


class Scheduler(Airflow):
    """This module's view of the tier's Airflow: its four flows, and the REST calls its
    tests make."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(stack.url)
        self.config = stack.config
        """FERRY_CONFIG as the DAG file reads it (no connection looked up)."""
        self.assets = stack.flows["assets"]
        self.connected = stack.flows["connected"]
        self.adopted = stack.flows["adopted"]
        self.differ = stack.flows["differ"]
        self.target_connection = stack.target_connection
        """The id of the `connected` flow's target connection (created by its test)."""

    def trigger_with(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Unpause the DAG and trigger a run of it now with `conf` (its trigger form's
        values); its run id."""
        self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        return str(run["dag_run_id"])

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


def _target_connection(sc: SecureClusters, conn_id: str) -> dict[str, Any]:
    """The secure target as a connection of Ferry's `ferry_kafka` type, a body for the REST
    API's POST /connections: bootstrap servers as its host, `ferry`'s SASL username and
    password as its login and password, the rest of the client settings in its extra."""
    return {"connection_id": conn_id, "conn_type": "ferry_kafka",
            "host": sc.bootstrap[TARGET], "login": "ferry", "password": sc.passwords["ferry"],
            "extra": json.dumps({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                 "ssl.ca.location": str(sc.ca)})}


@pytest.fixture(scope="module")
def scheduler(airflow_stack: Stack) -> Scheduler:
    return Scheduler(airflow_stack)


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
        "cycle": "success", "copy": "success", "finish": "success"}
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


def test_a_failover_or_an_adoption_is_refused_while_the_flow_runs_and_a_dry_run_shows_exact_offsets(
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

    adoption = {"flow": flow.flow.name, "from": "mm1", "group": group, "settle_seconds": 0,
                "execute": True}

    # when: the operator triggers the flow's DAG (its copy is a spark-submit: tens of
    # seconds) and at once an executed planned failover of that flow, and an executed
    # adoption of an old mirror's progress into it
    flow_run = scheduler.trigger(flow.dag_id)
    refused = {FAILOVER_DAG: scheduler.trigger_with(FAILOVER_DAG, form | {"execute": True}),
               ADOPT_DAG: scheduler.trigger_with(ADOPT_DAG, adoption)}
    in_progress = scheduler.run_state(flow.dag_id, flow_run)

    # then: both failed, each one try saying which DAG has a run in progress and what to
    # do, while that run was still queued or running: they checked the flow's run, not an
    # ended one; the adoption read no progress
    assert in_progress in ("queued", "running"), in_progress
    refused_at = []
    for (dag_id, run_id), (task_id, what) in zip(
            refused.items(), (("failover", "failover"), ("adopt", "adoption")), strict=True):
        assert scheduler.finished(dag_id, run_id, RUN_S) == "failed", (
            scheduler.tasks(dag_id, run_id))
        assert scheduler.tasks(dag_id, run_id) == {task_id: TaskTry("failed", 1)}
        log = scheduler.task_log(dag_id, run_id, task_id, 1)
        assert (f"flow {flow.flow.name}'s DAG {flow.dag_id} has a run in progress: pause the "
                f"DAG, wait for the run to end, then trigger the {what} again") in log, (
            log[-4000:])
        assert "adopting MM1's progress" not in log, log[-4000:]
        refused_at.append(scheduler.api(
            "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")["end_date"])
    # and the flow's run went on and succeeded, after both refusals
    assert scheduler.finished(flow.dag_id, flow_run, RUN_S) == "success", (
        scheduler.tasks(flow.dag_id, flow_run))
    flow_end = scheduler.api("GET", f"/dags/{flow.dag_id}/dagRuns/{flow_run}")["end_date"]
    assert all(datetime.fromisoformat(at) < datetime.fromisoformat(flow_end)
               for at in refused_at), (refused_at, flow_end)

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


def test_an_executed_adoption_takes_over_an_mm1_groups_progress_and_the_flows_next_run_goes_on(
    scheduler: Scheduler, clusters: dict[str, str]
) -> None:
    # given: 300 records in two partitions of the `adopted` flow's topic; an MM1-style pair
    # copied the first 100 of each under the flow's remote name and committed its group at
    # 90 before it stopped (so 10 of each were copied after its last commit)
    flow, group = scheduler.adopted, f"{scheduler.adopted.topic}-mm1"
    remote = flow.flow.remote_topic(flow.topic)
    create_topic(clusters["source"], flow.topic, 2)
    create_topic(clusters["target"], remote, 2)
    produce(clusters["source"], flow.topic,
            [(f"k{i}".encode(), f"v{i}".encode(), i % 2) for i in range(300)])
    mm1 = Producer({"bootstrap.servers": clusters["target"], "enable.idempotence": True})
    for p in (0, 1):
        for r in read_all(clusters["source"], flow.topic, p)[:100]:
            mm1.produce(remote, r.value, r.key, partition=p, timestamp=r.timestamp,
                        headers=list(r.headers))
    assert mm1.flush(30) == 0
    commit_group(clusters["source"], group, flow.topic, {0: 90, 1: 90})
    form = {"flow": flow.flow.name, "from": "mm1", "group": group, "settle_seconds": 1,
            "execute": True}

    # when: the operator triggers an executed adoption from the form
    adoption = scheduler.trigger_with(ADOPT_DAG, form)

    # then: it succeeded; its report (the task's XCom) adopts both partitions after the
    # last copied record, not at the group's commit, and names the 10 copied after it
    assert scheduler.finished(ADOPT_DAG, adoption, RUN_S) == "success", (
        scheduler.tasks(ADOPT_DAG, adoption))
    report = scheduler.xcom(ADOPT_DAG, adoption, "adopt")
    assert (report["flow"], report["from"], report["executed"], report["ok"]) == (
        flow.flow.name, "mm1", True, True)
    assert [(p["partition"], p["status"], p["progress"], p["position"], p["matched"],
             p["after_progress"], p["to_copy"]) for p in report["partitions"]] == [
        (p, "adopted", 90, 100, 100, 10, 50) for p in (0, 1)], report["partitions"]
    log = scheduler.task_log(ADOPT_DAG, adoption, "adopt", 1)
    assert f"flow {flow.flow.name}: adopting MM1's progress from group {group}" in log, (
        log[-4000:])
    assert f"{flow.topic}-1 -> {remote}-1: adopted; old mirror at 90, Ferry continues at 100" \
        in log, log[-4000:]
    assert positions(clusters, flow.flow, [(remote, 0), (remote, 1)]) == [100, 100]

    # when: the scheduler runs the flow's DAG
    flow_run = scheduler.trigger(flow.dag_id)

    # then: its run copied only the 50 records of each partition the old mirror had not,
    # and the remote topic holds every record once, in order, as the offset map says
    # (adopted entries for the first 100, the run's for the rest)
    assert scheduler.finished(flow.dag_id, flow_run, RUN_S) == "success", (
        scheduler.tasks(flow.dag_id, flow_run))
    (event,) = scheduler.asset_events(flow.dag_id, flow_run)
    assert (event["extra"]["records"], event["extra"]["partitions"]) == (
        100, {"0": [100, 150], "1": [100, 150]}), event["extra"]
    assert_exact(flow.flow, clusters, flow.topic, 2)


def test_an_adoption_that_leaves_partitions_unadopted_fails_and_names_them(
    scheduler: Scheduler, clusters: dict[str, str]
) -> None:
    # given: the `differ` flow's topic has 2 partitions, its remote topic 1 (an MM1
    # producer chose the partition), and the old mirror's group committed on both
    flow, group = scheduler.differ, f"{scheduler.differ.topic}-mm1"
    remote = flow.flow.remote_topic(flow.topic)
    create_topic(clusters["source"], flow.topic, 2)
    create_topic(clusters["target"], remote, 1)
    produce(clusters["source"], flow.topic, [(f"k{i}".encode(), b"v", i % 2) for i in range(20)])
    produce(clusters["target"], remote, [(f"k{i}".encode(), b"v", 0) for i in range(20)])
    commit_group(clusters["source"], group, flow.topic, {0: 10, 1: 10})

    # when: the operator triggers an executed adoption from the form
    adoption = scheduler.trigger_with(ADOPT_DAG, {
        "flow": flow.flow.name, "from": "mm1", "group": group, "settle_seconds": 0,
        "execute": True})

    # then: its one try failed, naming each partition and why, and nothing was written
    assert scheduler.finished(ADOPT_DAG, adoption, RUN_S) == "failed", (
        scheduler.tasks(ADOPT_DAG, adoption))
    assert scheduler.tasks(ADOPT_DAG, adoption) == {"adopt": TaskTry("failed", 1)}
    log = scheduler.task_log(ADOPT_DAG, adoption, "adopt", 1)
    why = f"{remote} has 1 partitions, {flow.topic} 2"
    assert (f"2 partitions were not adopted: {flow.topic}-0: {why}: partition 0 was not "
            f"mirrored to partition 0; {flow.topic}-1: {why}") in log, log[-4000:]
    assert f"{flow.topic}-1 -> {remote}-1: partitions-differ" in log, log[-4000:]
    assert positions(clusters, flow.flow, [(remote, 0)]) == [-1001]

"""One DAG per enabled flow: its shape, and real runs with dag.test() against real
brokers, Spark and Delta (each run in its own process: Airflow keeps global state)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.dags import run_dag, spark_connection, two_partitions_of
from tests.support.kafka_data import (
    assert_exact,
    create_topic,
    flow_config,
    produce,
    produce_transactions,
    read_all,
    wait_lso,
)

MULTI = """
clusters = A, B, C
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
C.bootstrap.servers = c:9092
A->B.enabled = true
A->B.topics = orders.*
C->B.enabled = true
ferry.schedule = */5 * * * *
C->B.ferry.schedule = none
"""


def test_one_dag_per_enabled_flow_with_the_expected_shape(tmp_path: Path) -> None:
    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"
    path.write_text(MULTI)
    dags = build_dags(path=str(path))
    # B->A, A->C, ...: pairs with heartbeats only, emitted by ferry_heartbeats
    assert sorted(dags) == ["ferry_A_to_B", "ferry_C_to_B", "ferry_adopt", "ferry_backfill",
                            "ferry_failover", "ferry_heartbeats", "ferry_maintenance",
                            "ferry_verify"]
    dag = dags["ferry_A_to_B"]
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert set(dag.tags) == {"ferry", "source:A", "target:B"}
    assert "`orders.*`" in dag.doc_md and "`A.orders`" in dag.doc_md
    # one task process does a whole idle or warm run; spark-submit's copy is a task of its
    # own, and `finish` records and translates after it
    assert [t.task_id for t in dag.topological_sort()] == ["cycle", "copy", "finish"]
    assert dag.get_task("cycle").execution_timeout.total_seconds() == 21600
    assert dag.get_task("cycle").retries == 2
    copy = dag.get_task("copy")
    assert copy._conn_id == "spark_default"
    assert copy.application.endswith("ferry/jobs/ferry_copy.py")
    assert copy.conf["spark.speculation"] == "false"
    # a hung copy is stopped (the flow's next run then resumes from what was committed)
    assert copy.execution_timeout.total_seconds() == 21600
    assert type(dags["ferry_C_to_B"].timetable).__name__ == "NullTimetable"  # manual only
    assert dag.timetable.expression == "*/5 * * * *"


@pytest.mark.parametrize("dag_id", ["ferry_C_to_B", "ferry_backfill", "ferry_heartbeats"])
def test_a_tasks_process_builds_only_the_dag_it_parses_the_file_for(
    tmp_path: Path, dag_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow's task runner parses the DAG file in the task's own process, naming the DAG in
    # its parsing context (these variables)
    from airflow.sdk.definitions.context import (
        _AIRFLOW_PARSING_CONTEXT_DAG_ID,
        _AIRFLOW_PARSING_CONTEXT_TASK_ID,
    )

    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"
    path.write_text(MULTI)
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_TASK_ID, "any")
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, dag_id)
    assert list(build_dags(path=str(path))) == [dag_id]
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, "ferry_gone")
    assert len(build_dags(path=str(path))) == 8  # unknown: every DAG, as Airflow parses


def test_a_flows_task_parses_the_dag_file_building_only_its_flow_and_its_reverse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every pair of the config's clusters was built and validated in each task's parse: with
    # twenty flows, seconds of a new task's start at each DAG run's turn
    from airflow.sdk.definitions.context import (
        _AIRFLOW_PARSING_CONTEXT_DAG_ID,
        _AIRFLOW_PARSING_CONTEXT_TASK_ID,
    )

    import ferry.config.mm2 as mm2
    from ferry.airflow.dags import build_dags

    built: list[str] = []
    build = mm2._flow

    def counted(props: Any, source: str, target: str, *args: Any) -> Any:
        built.append(f"{source}->{target}")
        return build(props, source, target, *args)

    monkeypatch.setattr(mm2, "_flow", counted)
    path = tmp_path / "mm2.properties"
    path.write_text(MULTI)
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_TASK_ID, "cycle")
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, "ferry_C_to_B")

    assert list(build_dags(path=str(path))) == ["ferry_C_to_B"]
    assert sorted(built) == ["B->C", "C->B"]


def test_parsing_the_dag_file_looks_up_no_airflow_connection(tmp_path: Path) -> None:
    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"  # B's settings live only in a connection nobody has
    path.write_text(MULTI.replace("B.bootstrap.servers = b:9092",
                                  "B.ferry.connection = kafka_b_nowhere\n"
                                  "B.security.protocol = SASL_SSL\nB.sasl.mechanism = PLAIN"))
    dags = build_dags(path=str(path))
    assert {"ferry_A_to_B", "ferry_C_to_B", "ferry_failover"} <= set(dags)


def test_retries_pool_and_queue_of_every_task_come_from_the_flows_settings(
        tmp_path: Path) -> None:
    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"
    path.write_text(MULTI + "A->B.ferry.task.retries = 5\nA->B.ferry.copy.retries = 0\n"
                    "A->B.ferry.task.retry.delay.seconds = 90\nA->B.ferry.task.pool = mirrors\n"
                    "A->B.ferry.task.queue = dr_workers\nA->B.ferry.copy.timeout.seconds = 600\n")
    dags = build_dags(path=str(path))

    # the flow with settings: every task in its pool and queue, with its retries and timeout
    tasks = {t.task_id: t for t in dags["ferry_A_to_B"].tasks}
    assert {(t.pool, t.queue) for t in tasks.values()} == {("mirrors", "dr_workers")}
    assert {k: t.retries for k, t in tasks.items()} == {"cycle": 5, "copy": 0, "finish": 5}
    assert {t.retry_delay.total_seconds() for t in tasks.values()} == {90}
    # the copy may take 600 s; `cycle` (which copies itself on a Connect server) and
    # `finish` one cycle's 900 s at least, however short the copy's limit
    assert {k: t.execution_timeout.total_seconds() for k, t in tasks.items()} == {
        "cycle": 900, "copy": 600, "finish": 900}
    # the other flow: Airflow's default pool and queue, 2 retries (the copy 1), 30 s apart
    defaults = {t.task_id: t for t in dags["ferry_C_to_B"].tasks}
    assert {t.pool for t in defaults.values()} == {"default_pool"}
    assert {k: t.retries for k, t in defaults.items()} == {"cycle": 2, "copy": 1, "finish": 2}
    assert {t.retry_delay.total_seconds() for t in defaults.values()} == {30}
    assert {k: t.execution_timeout.total_seconds() for k, t in defaults.items()} == {
        "cycle": 21600, "copy": 21600, "finish": 900}


def notify_team(context: dict[str, Any]) -> None:
    """A team's failure callback, named in the config as module:function."""


def callbacks(task: Any) -> list[Any]:
    found = task.on_failure_callback
    return list(found) if isinstance(found, list | tuple) else [found]


def test_a_teams_owner_tags_and_failure_callback_reach_every_dag_without_editing_the_file(
    tmp_path: Path
) -> None:
    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"
    path.write_text(MULTI + "ferry.dag.owner = kafka-platform\nferry.dag.tags = dr, tier-1\n"
                    "ferry.dag.on.failure.callback = tests.dags.test_flow_dags:notify_team\n"
                    "C->B.ferry.dag.tags = dr\n")
    dags = build_dags(path=str(path))

    flow = dags["ferry_A_to_B"]
    assert set(flow.tags) >= {"ferry", "source:A", "target:B", "dr", "tier-1"}
    assert {t.owner for t in flow.tasks} == {"kafka-platform"}
    assert all(callbacks(t) == [notify_team] for t in flow.tasks)
    # the DAGs of the whole config take what every flow shares: the owner, the callback,
    # and only the tag both flows carry
    verify = dags["ferry_verify"]
    assert {t.owner for t in verify.tasks} == {"kafka-platform"}
    assert all(callbacks(t) == [notify_team] for t in verify.tasks)
    assert "dr" in verify.tags and "tier-1" not in verify.tags


def test_a_failure_callback_that_does_not_import_is_the_dag_files_error_naming_the_key(
    tmp_path: Path
) -> None:
    from ferry.airflow.dags import build_dags
    from ferry.errors import ConfigError

    path = tmp_path / "mm2.properties"
    path.write_text(MULTI + "ferry.dag.on.failure.callback = no_such_team.alerts:page\n")
    with pytest.raises(ConfigError) as refused:
        build_dags(path=str(path))
    (problem,) = refused.value.problems
    assert problem.key == "ferry.dag.on.failure.callback"
    assert "no_such_team.alerts:page does not import" in problem.message


def note_retry(context: dict[str, Any]) -> None:
    """A team's retry callback, named in `ferry.dag.default.args`."""


def test_a_teams_default_args_reach_every_task_of_every_dag(tmp_path: Path) -> None:
    from datetime import timedelta

    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"
    path.write_text(MULTI + 'ferry.dag.default.args = {"priority_weight": 10, '
                    '"depends_on_past": true, "retry_exponential_backoff": true, '
                    '"max_retry_delay": 600, '
                    '"on_retry_callback": "tests.dags.test_flow_dags:note_retry"}\n')
    dags = build_dags(path=str(path))

    for dag_id in ("ferry_A_to_B", "ferry_verify", "ferry_backfill"):
        for task in dags[dag_id].tasks:
            # (a mapped task holds the backoff as its multiplier: 2.0 for true)
            assert (task.priority_weight, task.depends_on_past,
                    bool(task.retry_exponential_backoff), task.max_retry_delay) == (
                10, True, True, timedelta(seconds=600)), (dag_id, task.task_id)
            found = task.on_retry_callback
            assert (list(found) if isinstance(found, list | tuple) else [found]) == [note_retry]
    # Ferry's own settings stay Ferry's
    assert {t.task_id: t.retries for t in dags["ferry_A_to_B"].tasks} == {
        "cycle": 2, "copy": 1, "finish": 2}


@pytest.mark.parametrize(("args", "says"), [
    ('{"priority_wieght": 10}', "priority_wieght is not an argument of Airflow's operators"),
    ('{"on_retry_callback": "no_such_team.alerts:note"}',
     "no_such_team.alerts:note does not import"),
])
def test_a_default_arg_airflow_would_drop_or_cannot_import_is_the_dag_files_error(
    tmp_path: Path, args: str, says: str
) -> None:
    from ferry.airflow.dags import build_dags
    from ferry.errors import ConfigError

    path = tmp_path / "mm2.properties"
    path.write_text(MULTI + f"ferry.dag.default.args = {args}\n")
    with pytest.raises(ConfigError) as refused:
        build_dags(path=str(path))
    (problem,) = refused.value.problems
    assert problem.key == "ferry.dag.default.args" and says in problem.message, problem.message
    if "wieght" in args:
        assert problem.fix == "did you mean priority_weight?"


def test_a_broken_config_fails_the_dag_file_with_every_problem(tmp_path: Path) -> None:
    from ferry.airflow.dags import build_dags
    from ferry.errors import ConfigError

    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A\nA->B.enabled = true\n")
    with pytest.raises(ConfigError) as err:
        build_dags(path=str(path))
    assert {"A.bootstrap.servers", "A->B.enabled"} <= {p.key for p in err.value.problems}


def continuous_dag(tmp_path: Path, settings: str) -> Any:
    """The DAG of flow A->B with `ferry.schedule = @continuous`, runs of 300 s, and
    `settings` (lines of the flow's own)."""
    from ferry.airflow.dags import build_dags

    path = tmp_path / "mm2.properties"
    path.write_text(MULTI + "A->B.ferry.schedule = @continuous\n"
                    "A->B.ferry.continuous.run.seconds = 300\n" + settings)
    return build_dags(path=str(path))["ferry_A_to_B"]


def test_a_continuous_flow_is_one_task_of_cycles_in_runs_a_span_apart_that_overlap(
    tmp_path: Path
) -> None:
    from datetime import timedelta

    from ferry.core.spans import run_span

    dag = continuous_dag(tmp_path, "A->B.ferry.continuous.handover.seconds = 45\n")
    assert [t.task_id for t in dag.tasks] == ["mirror_continuously"]
    # a run every span of the flow (its own: within 10% of the configured one,
    # `ferry.core.spans`), and two at once, the one before handing over to the next
    span = run_span("A->B", 300)
    assert 270 <= span <= 330
    assert type(dag.timetable).__name__ == "DeltaTriggerTimetable"
    assert dag.timetable.delta == timedelta(seconds=round(span))
    assert dag.max_active_runs == 2 and not dag.catchup
    assert "continuous" in dag.tags
    task = dag.get_task("mirror_continuously")
    assert task.retries == 2
    # the longest span a flow's run may have, its hand-over, a cycle, a minute
    assert task.execution_timeout.total_seconds() == pytest.approx(330 + 45 + 900 + 60)
    assert f"every {span:.0f} s" in dag.doc_md and "at most 45 s more" in dag.doc_md


def test_an_at_least_once_continuous_flows_runs_keep_airflows_continuous_schedule(
    tmp_path: Path
) -> None:
    # an at_least_once writer has no transaction for Kafka to fence: a run beside the one
    # before could double records at every turn
    from ferry.core.spans import run_span

    dag = continuous_dag(tmp_path, "A->B.ferry.delivery = at_least_once\n")
    assert type(dag.timetable).__name__ == "ContinuousTimetable"
    assert dag.max_active_runs == 1
    task = dag.get_task("mirror_continuously")
    assert task.execution_timeout.total_seconds() == pytest.approx(330 + 900 + 60)
    assert f"copies for {run_span('A->B', 300):.0f} s; the next starts as it ends" in dag.doc_md




@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.spark_submit  # the tier's one flow DAG whose copies hand off to `copy`
def test_dag_mirrors_sample_topics_then_only_new_records_then_idles(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from ferry.core.tables import StatePaths
    from ferry.state.reader import rows

    plain, txn = f"{topic_name}-plain", f"{topic_name}-txn"
    create_topic(clusters["source"], plain, 3)
    create_topic(clusters["source"], txn, 1)
    produce(clusters["source"], plain, [(None if i % 5 == 0 else f"k{i}".encode(),
                                         None if i % 9 == 0 else f"v{i}".encode(), i % 3)
                                        for i in range(900)])
    produce_transactions(clusters["source"], txn, [(20, True), (7, False), (5, True)], tid=txn)
    wait_lso(clusters["source"], txn, 0, 35)
    config = flow_config(tmp_path, clusters, f"{topic_name}-.*")
    flow = config.enabled_flows[0]

    first = run_dag(config.path, flow.dag_id)

    assert first["state"] == "success", first["log"][-4000:]
    assert (first["tasks"]["copy"], first["tasks"]["finish"]) == ("success", "success")
    assert_exact(flow, clusters, plain, 3)
    assert_exact(flow, clusters, txn, 1)
    # and its spark-submit job says how long its Spark session took to start (where a slow
    # job's time goes: on a loaded machine, minutes)
    assert re.search(r"INFO ferry\.jobs: Spark session ready in \d+\.\d s \[flow=",
                     first["log"]), first["log"][-4000:]
    # `finish`, once the run is recorded, told Airflow which remote topics got records
    assert sorted((e["uri"].rsplit("/", 1)[1], e["extra"]["records"])
                  for e in first["asset_events"]) == [
        (flow.remote_topic(plain), 900), (flow.remote_topic(txn), 25)]
    state = StatePaths(flow.ferry.state_dir)
    copied = rows(state.runs, flow.name)
    assert sum(r["records"] for r in copied) == 900 + 25
    assert {r["outcome"] for r in copied} == {"copied"}
    assert len(rows(state.offset_map, flow.name)) >= 4
    lag = rows(state.lag, flow.name)  # the Ferry page's lag chart: a point per partition
    assert sorted((r["topic"], r["partition"], r["lag_records"]) for r in lag) == [
        (plain, 0, 0), (plain, 1, 0), (plain, 2, 0), (txn, 0, 0)]

    produce(clusters["source"], plain, [(b"new", b"record", 1)] * 7)
    second = run_dag(config.path, flow.dag_id)
    assert second["state"] == "success"
    new_runs = [r for r in rows(state.runs, flow.name) if r["run_id"] not in
                {c["run_id"] for c in copied}]
    assert sum(r["records"] for r in new_runs) == 7
    assert_exact(flow, clusters, plain, 3)

    idle = run_dag(config.path, flow.dag_id)
    assert idle["state"] == "success"
    # no Spark job for an idle cycle: `cycle` recorded the lag and ran the checkpoints
    assert idle["tasks"] == {"cycle": "success", "copy": "skipped", "finish": "skipped"}
    assert "ferry copy job" not in idle["log"]
    assert idle["asset_events"] == []  # nothing mirrored, nothing for downstream DAGs




@pytest.mark.integration
@pytest.mark.parametrize("spark", [
    # a spark_connect connection: the copy runs through the session's warm server
    pytest.param("warm", marks=pytest.mark.spark),
    # spark-submit's local[*], and 300 records, a minute of a trickle: the local runner
    "submit",
])
def test_a_run_copies_in_its_cycle_task_through_a_warm_spark_or_a_small_plan_without_a_jvm(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, spark: str
) -> None:
    two_partitions_of(clusters, topic_name, 300)
    # the product's default runner, which picks by the master and the plan's size
    config = flow_config(tmp_path, clusters, topic_name, "ferry.copy.runner = auto\n")
    flow = config.enabled_flows[0]
    conn = spark_connection() if spark == "warm" else {"conn_type": "spark", "host": "local[*]"}

    first = run_dag(config.path, flow.dag_id, spark_conn=conn)

    # one task process ran the whole cycle, copy included: no spark-submit task
    assert first["state"] == "success", first["log"][-4000:]
    assert first["tasks"] == {"cycle": "success", "copy": "skipped", "finish": "skipped"}
    assert "SparkSubmit" not in first["log"]
    assert "run recorded (by its job):" in first["log"]  # the job's own result, no read-back
    if spark == "submit":  # no JVM at all: the lanes ran as threads of the task's process
        assert "copying 300 offsets with the local runner" in first["log"], first["log"][-4000:]
        assert "Spark session ready" not in first["log"]
    assert_exact(flow, clusters, topic_name, 2)
    assert sorted((e["uri"].rsplit("/", 1)[1], e["extra"]["records"])
                  for e in first["asset_events"]) == [(flow.remote_topic(topic_name), 300)]
    idle = run_dag(config.path, flow.dag_id, spark_conn=conn)
    assert idle["state"] == "success"
    assert idle["tasks"] == {"cycle": "success", "copy": "skipped", "finish": "skipped"}
    assert "ferry copy job" not in idle["log"]


@pytest.mark.integration
@pytest.mark.spark
def test_a_continuous_run_mirrors_cycle_after_cycle_for_its_span(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, connect_url: str
) -> None:
    two_partitions_of(clusters, topic_name, 200)
    config = flow_config(tmp_path, clusters, topic_name, "ferry.schedule = @continuous\n"
                         "ferry.continuous.run.seconds = 20\n"
                         "ferry.continuous.handover.seconds = 0\n"
                         f"ferry.spark.master = {connect_url}\n")
    flow = config.enabled_flows[0]

    run = run_dag(config.path, flow.dag_id, spark_conn={})

    assert run["state"] == "success", run["log"][-4000:]
    assert run["tasks"]["mirror_continuously"] == "success"
    # Ferry's lines go through Airflow's task logging: its logger's name in brackets
    cycles = [line for line in run["log"].splitlines()
              if "[ferry.continuous]" in line and "] cycle " in line]
    assert len(cycles) >= 2, run["log"][-4000:]  # one copy, then idle cycles until 20 s
    assert "200 offsets copied" in cycles[0]
    assert_exact(flow, clusters, topic_name, 2)
    # one event per remote topic for the whole run, its cycles' ranges merged
    assert [(e["uri"].rsplit("/", 1)[1], e["extra"]["records"], e["extra"]["partitions"])
            for e in run["asset_events"]] == [
        (flow.remote_topic(topic_name), 200, {"0": [0, 100], "1": [0, 100]})]


@pytest.mark.integration
def test_the_heartbeats_dag_writes_heartbeats_of_pairs_without_a_data_flow(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from ferry.core.heartbeats import decode

    config = flow_config(tmp_path, clusters, f"{topic_name}-.*",
                         "emit.heartbeats.enabled = true\n"
                         "heartbeats.topic.replication.factor = 1\n")
    flow = config.enabled_flows[0]  # its reverse pair has no data flow: heartbeats only

    run = run_dag(config.path, "ferry_heartbeats")

    assert run["state"] == "success", run["log"][-3000:]
    beats = [decode(r.key, r.value) for r in read_all(clusters["source"], "heartbeats", 0)]
    assert any(b is not None and (b.source, b.target) == (flow.target, flow.source)
               for b in beats)


@pytest.mark.integration
def test_the_verify_dag_checks_a_flow_and_records_it(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    from tests.support.kafka_data import run_cycle

    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name, [(None, f"v{i}".encode(), i % 2) for i in range(50)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    run_cycle(flow)

    run = run_dag(config.path, "ferry_verify")

    assert run["state"] == "success", run["log"][-3000:]
    from ferry.core.tables import StatePaths
    from ferry.state.reader import rows

    checked = rows(StatePaths(flow.ferry.state_dir).verify, flow.name)
    assert {r["outcome"] for r in checked} == {"ok"} and sum(r["checked"] for r in checked) == 50

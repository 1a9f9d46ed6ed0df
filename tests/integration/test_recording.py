"""Recording a run in Delta stays exact when jobs overlap or repeat (real Spark, Delta and
brokers): entries appended once however many jobs record them, a gap recorded once however
many runs find it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ferry.core import plan_file
from ferry.core.internal import offset_map_topic
from ferry.core.plan_file import PlanFile
from ferry.core.planner import Gap
from ferry.core.tables import StatePaths
from ferry.kafka.mapreader import STABLE_WAIT_S
from ferry.runtime.recording import record_offset_map, settle_entries
from ferry.spark.copy_job import run_copy_job, spark_append
from ferry.state.reader import rows
from tests.support.kafka_data import create_topic, flow_config, produce, read_all, run_cycle

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ferry.config import Flow

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_two_jobs_recording_the_same_entries_at_once_append_them_once(
    spark: SparkSession, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a run whose entries are committed on the target and not yet in Delta
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), i % 2) for i in range(50)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow, "copied-without-recording")
    entries = [r for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    paths = StatePaths(flow.ferry.state_dir)

    # when: one job records them, and another that looked before the first committed (a
    # retried `copy` beside its first attempt) records the same
    assert record_offset_map(spark_append(spark), flow, paths) == len(entries)
    assert record_offset_map(spark_append(spark), flow, paths, after=-1) == 0

    # then
    assert len(rows(paths.offset_map, flow.name)) == len(entries)
    assert len(rows(paths.runs, flow.name)) == 2  # one rebuilt row per range, not two


def test_a_gap_that_every_run_finds_again_is_recorded_once(
    spark: SparkSession, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow, "topology")  # the remote and offset-map topics
    gap = Gap(topic_name, 0, 10, 25)
    for run in ("run-1", "run-2", "run-3"):  # ferry.on.gap=fail: each run plans it again
        plan = plan_file.write(tmp_path / f"{run}.json",
                               PlanFile(flow.name, run, 1, ranges=(), gaps=(gap,)))
        run_copy_job(spark, str(tmp_path / "mm2.properties"), flow, plan)

    recorded = rows(StatePaths(flow.ferry.state_dir).gaps, flow.name)
    assert [(r["run_id"], r["gap_start"], r["gap_end"], r["records"]) for r in recorded] == [
        ("run-1", 10, 25, 15)]


def test_a_failed_runs_append_beside_the_offset_map_loses_no_history(
    spark: SparkSession, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a run copied, its entries committed on the target, and its own runs append
    # (which runs beside the offset map's) failed
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), i % 2) for i in range(30)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow, "runs-append-failed")
    paths = StatePaths(flow.ferry.state_dir)
    failed: Future[bool] = Future()
    failed.set_exception(RuntimeError("the runs table could not be written"))

    # when: the offset map is recorded, as the job does, its entries waited for
    settle_entries(flow, STABLE_WAIT_S)
    mapped = record_offset_map(spark_append(spark), flow, paths, runs=failed)

    # then: the run's rows were rebuilt from its entries instead
    assert mapped == 2
    assert sorted((r["run_id"], r["partition"], r["records"])
                  for r in rows(paths.runs, flow.name)) == [
        ("runs-append-failed", 0, 15), ("runs-append-failed", 1, 15)]
    # and with nothing left to record, the failed append is the job's error
    with pytest.raises(RuntimeError, match="could not be written"):
        record_offset_map(spark_append(spark), flow, paths, runs=failed)


def test_a_job_sigkilled_between_its_runs_and_offset_map_commits_loses_and_doubles_nothing(
    spark: SparkSession, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a copy job in a process of its own, held right after its first Delta commit
    # of the run (its runs rows), then SIGKILLed there
    from ferry.steps.cycle import write_plan
    from ferry.steps.plan import prepare

    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), i % 2) for i in range(40)])
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    plan = write_plan(flow, prepare(flow, run_id="killed", master="local[2]"))
    paths = StatePaths(flow.ferry.state_dir)
    marker = tmp_path / "runs-committed"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.copy_job_main", str(tmp_path / "mm2.properties"),
         flow.name, str(plan), str(marker)], start_new_session=True,
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "job.err").open("wb"))
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert child.poll() is None, (tmp_path / "job.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "the job never committed its runs"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert not rows(paths.offset_map, flow.name)  # killed before the offset map's commit

    # when: the next job records what the target committed
    mapped = record_offset_map(spark_append(spark), flow, paths)

    # then: the runs were the first commit, so nothing of the run was lost, and no row of
    # it was written twice
    assert mapped > 0
    assert sorted((r["run_id"], r["partition"], r["records"], r["outcome"])
                  for r in rows(paths.runs, flow.name)) == [
        ("killed", 0, 20, "copied"), ("killed", 1, 20, "copied")]
    entries = [r for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    assert len(rows(paths.offset_map, flow.name)) == len(entries)


def test_a_retried_job_of_the_same_plan_still_counts_what_its_first_attempt_copied(
    spark: SparkSession, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a copy job that copied and recorded its plan, then ran again with the same
    # plan (a retried `copy` task): every range already committed, recorded "skipped"
    from ferry.config import load_config
    from ferry.steps.cycle import Cycle, write_plan
    from ferry.steps.plan import prepare

    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), i % 2) for i in range(60)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    plan = write_plan(flow, prepare(flow, run_id="retried", master="local[2]"))
    first = run_copy_job(spark, config.path, flow, plan)
    again = run_copy_job(spark, config.path, flow, plan)
    assert (first.records, again.records) == (60, 0)
    outcomes = sorted(r["outcome"] for r in rows(StatePaths(flow.ferry.state_dir).runs,
                                                 flow.name, run_id="retried"))
    assert outcomes == ["copied", "copied", "skipped", "skipped"]

    # when: the DAG's finish task records the run from Delta
    summary = Cycle(load_config(config.path), flow, run_id="retried").record(idle=False)

    # then: the run copied 60 records over both partitions (its Asset event says so)
    assert summary["records"] == 60
    assert summary["topics"] == {topic_name: {"records": 60,
                                              "partitions": {"0": [0, 30], "1": [0, 30]}}}


@pytest.mark.parametrize("second_rows", ["handed-over", "still-copying"])
def test_a_batch_behind_the_copies_rebuilds_no_run_whose_rows_are_still_to_come(
    spark: SparkSession, clusters: dict[str, str], topic_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, second_rows: str
) -> None:
    # given: a continuous loop's recorder, its first batch (run "first") held in its runs
    # append while the next cycle (run "second") commits its copy on the target and either
    # hands over its rows or is still to (its job not yet returned when the batch goes
    # on): the batch then reads both runs' entries from the offset-map topic, and only the
    # first run's rows are in Delta
    import threading

    import ferry.state.writer as writer
    from ferry.core.tables import RUNS_DDL
    from ferry.runtime.recorder import Recorder
    from ferry.steps.cycle import write_plan
    from ferry.steps.plan import prepare

    create_topic(clusters["source"], topic_name, 2)
    config = flow_config(tmp_path, clusters, topic_name,
                         "ferry.state.record.interval.seconds = 3600\n")
    flow = config.enabled_flows[0]
    paths = StatePaths(flow.ferry.state_dir)
    held, release = threading.Event(), threading.Event()
    append = writer.append

    def held_runs_append(path: str, ddl: str, rows_: list[dict[str, object]],
                         once: tuple[str, int] | None = None) -> bool:
        if ddl == RUNS_DDL and rows_ and not held.is_set():
            held.set()
            assert release.wait(120), "the test never released the batch"
        return append(path, ddl, rows_, once)  # type: ignore[arg-type]

    monkeypatch.setattr(writer, "append", held_runs_append)  # the recorder's (delta-rs)
    recorder = Recorder(flow)
    if second_rows == "still-copying":
        add = recorder.add

        def after_the_batch(run_id: str, rows_: list[dict[str, object]]) -> None:
            if run_id == "second":  # committed; the batch goes on and ends before the rows
                release.set()
                deadline = time.monotonic() + 120
                while recorder.batches < 1:
                    assert time.monotonic() < deadline, "the first batch never ended"
                    time.sleep(0.05)
            add(run_id, rows_)  # type: ignore[arg-type]

        monkeypatch.setattr(recorder, "add", after_the_batch)
    try:
        for run_id in ("first", "second"):
            produce(clusters["source"], topic_name,
                    [(None, f"{run_id}-{i}".encode(), i % 2) for i in range(20)])
            plan = write_plan(flow, prepare(flow, run_id=run_id, master="local[2]"))
            run_copy_job(spark, config.path, flow, plan, recorder=recorder)
            assert held.wait(120), "the first batch never started"

        # when: the held batch goes on, and the loop's last flush writes the rest
        release.set()
        deadline = time.monotonic() + 120
        while recorder.batches < 1:
            assert time.monotonic() < deadline, "the first batch never ended"
            time.sleep(0.05)
        # the first batch stopped before the second run's entries: recorded without its
        # rows, they would be lost for good were those rows left to a next run
        assert "second" not in {r["run_id"] for r in rows(paths.offset_map, flow.name)}
        recorder.close(240)
    finally:
        release.set()

    # then: each run has its own rows, one per partition, and none was rebuilt as if its
    # job had died before recording it (a run then counted twice)
    found = sorted((r["run_id"], r["partition"], r["records"])
                   for r in rows(paths.runs, flow.name))
    assert found == [("first", 0, 10), ("first", 1, 10), ("second", 0, 10), ("second", 1, 10)]


def test_a_job_records_its_own_entries_though_their_commit_becomes_readable_late(
    clusters: dict[str, str], topic_name: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # A transaction's commit returns before its markers, and with them the last stable
    # offset, reach the offset-map topic: a job reading its entries at once could find
    # none of them stable, leave Delta behind the target, and make the next idle run
    # start a job only to record them. Forced here: another writer's transaction, open on
    # the offset-map topic before the job's commits, ends only once the job, its entries
    # committed, waits for them to be readable (a job that reads at once never waits).
    from confluent_kafka import Producer

    from ferry.kafka import mapreader
    from ferry.runtime.local import LocalRunner
    from ferry.steps.plan import prepare

    create_topic(clusters["source"], topic_name, 2)
    flow = flow_config(tmp_path, clusters, topic_name).enabled_flows[0]
    run_cycle(flow, "topology")  # the remote and offset-map topics
    produce(clusters["source"], topic_name,
            [(None, f"v{i}".encode(), i % 2) for i in range(40)])
    topic = offset_map_topic(flow)
    other = Producer({"bootstrap.servers": clusters["target"], "log_level": 3,
                      "transactional.id": f"{topic_name}-other"})
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(topic, key=b"another-writer", value=b"{}", partition=0)
    assert other.flush(30) == 0
    ending = threading.Lock()

    def end_the_other() -> None:
        if ending.acquire(blocking=False):  # once, by the first to come
            other.abort_transaction(30)

    waits = mapreader.wait_stable

    def wait_while_the_other_ends(flow: Flow, within: float) -> tuple[int, int]:
        threading.Timer(1.0, end_the_other).start()
        return waits(flow, within)

    monkeypatch.setattr(mapreader, "wait_stable", wait_while_the_other_ends)
    try:
        copied = LocalRunner(flow).run(prepare(flow, run_id="late").plan_file())
    finally:
        end_the_other()  # not ended by a wait that never came: after the job read

    assert copied.exit_code == 0 and copied.summary is not None
    assert copied.summary["records"] == 40
    entries = [r for r in read_all(clusters["target"], topic, 0)
               if r.value is not None and b'"late"' in r.value]
    recorded = rows(StatePaths(flow.ferry.state_dir).offset_map, flow.name, run_id="late")
    assert len(entries) >= 2 and len(recorded) == len(entries)

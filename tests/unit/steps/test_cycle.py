"""One run of a flow (`ferry.steps.cycle`) against in-memory clusters: what each step reads,
when the copy job starts, and where a failed copy stops the run. The copy itself runs on
real brokers in `tests/integration/test_lane.py` and `test_mirror_cli.py`."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import ferry.spark.submit
from ferry.config import Config
from ferry.config.connections import SNAPSHOT_SUFFIX
from ferry.core.job import Copied, result_path, run_summary
from ferry.core.plan_file import PlanFile
from ferry.core.positions import encode_position
from ferry.core.tables import RangeOutcome
from ferry.steps.cycle import PLAN_HISTORY, Clusters, Cycle, plans_dir, run
from tests.unit.steps.conftest import ConfigWith
from tests.unit.steps.fakes import FakeCluster, MemoryStore

MAP_TOPIC = "ferry-offset-map.A.internal"
GROUP = "__ferry-positions.A"


def clusters(*ends: int) -> Clusters:
    """A holds `orders` (one partition per end offset); B holds its remote topic, empty."""
    source = FakeCluster("A", ids={"orders": "s1"}).topic("orders", *ends)
    target = FakeCluster("B", ids={"A.orders": "t1"}).topic("A.orders", *(0 for _ in ends)) \
        .topic(MAP_TOPIC, 0)
    return Clusters(source, target)  # type: ignore[arg-type]


class Jobs:
    """Stands in for the copy job on Spark (`ferry.spark.submit.run_copy`, behind the
    default runner): records each plan it is handed, returns `exit_code` and, with
    `records`, the run as a job that copied that many records of each range recorded it."""

    def __init__(self, exit_code: int = 0, records: int | None = None) -> None:
        self.exit_code, self.records = exit_code, records
        self.plans: list[dict[str, Any]] = []

    def __call__(self, config_path: str, flow: str, plan_path: str, master: str,
                 loops: Any = None, *_: Any) -> Copied:
        plan = json.loads(Path(plan_path).read_text())
        self.plans.append(plan)
        if self.records is None:
            return Copied(self.exit_code)
        runs = [{"topic": r["topic"], "partition": r["partition"], "range_start": r["start"],
                 "range_end": r["end"], "records": self.records, "bytes": 10 * self.records,
                 "outcome": RangeOutcome.COPIED} for r in plan["ranges"]]
        return Copied(self.exit_code, run_summary(plan["run_id"], runs, 0))


@pytest.fixture
def config(config_with: ConfigWith) -> Config:
    """A->B mirroring every topic, its copies Spark's (`ferry.copy.runner = spark`): these
    tests hand their plans to a stand-in for the Spark job (`Jobs`), and plans this small
    would go to the local runner by default (the last tests here)."""
    return config_with("ferry.copy.runner = spark\n")


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Jobs:
    jobs = Jobs()
    monkeypatch.setattr(ferry.spark.submit, "run_copy", jobs)
    return jobs


def test_a_cycle_lists_each_clusters_topics_once_for_its_sync_and_its_plan(
    config: Config, jobs: Jobs
) -> None:
    both = clusters(5, 0, 7)

    Cycle(config, config.flow("A->B"), "r1", clusters=both).start()

    assert (both.source.topic_listings, both.target.topic_listings) == (1, 1)  # type: ignore[attr-defined]


def test_an_idle_cycle_writes_no_plan_and_starts_no_job(
    config: Config, jobs: Jobs, tmp_path: Path
) -> None:
    both = clusters(0, 0)
    for partition in (0, 1):  # both partitions were copied up to their (empty) end
        both.target.groups.setdefault(GROUP, {})[("A.orders", partition)] = (  # type: ignore[attr-defined]
            0, encode_position(0, "ferry.A->B.writer-0-of-1", "s1"))
    cycle = Cycle(config, config.flow("A->B"), "r1", clusters=both)

    result = cycle.start()

    assert result.planned is not None and result.planned.idle
    assert cycle.copy(result, str(tmp_path / "mm2.properties"))
    assert jobs.plans == [] and result.copy_exit_code is None and result.ok


def test_a_cycle_with_work_hands_its_exact_ranges_to_the_copy_job(
    config: Config, jobs: Jobs, tmp_path: Path
) -> None:
    result = run(str(tmp_path / "mm2.properties"), config, config.flow("A->B"),
                 master="local[1]", clusters=clusters(5, 0, 7), run_id="r1")

    assert result.ok and result.copy_exit_code == 0
    [plan] = jobs.plans
    assert plan["run_id"] == "r1"
    # the empty partition 1 gets its first position too (a range of nothing)
    assert sorted((r["partition"], r["start"], r["end"]) for r in plan["ranges"]) == [
        (0, 0, 5), (1, 0, 0), (2, 0, 7)]


def test_a_failed_copy_stops_the_run_before_record_and_checkpoints(
    config: Config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ferry.spark.submit, "run_copy", Jobs(exit_code=1))
    monkeypatch.setattr(Cycle, "finish", lambda *_: pytest.fail("finish ran after a failed copy"))

    result = run(str(tmp_path / "mm2.properties"), config, config.flow("A->B"),
                 master="local[1]", clusters=clusters(5), run_id="r1")

    assert not result.ok and result.copy_exit_code == 1
    assert result.recorded == {} and result.checkpoints == {}


def test_recorded_runs_keep_only_the_newest_plan_files_and_no_stale_snapshot(
    config: Config, jobs: Jobs, tmp_path: Path
) -> None:
    # given: a snapshot a killed backfill chunk's job left two days ago
    flow = config.flow("A->B")
    stale = plans_dir(flow) / "backfill-b1" / ("chunk-0.json" + SNAPSHOT_SUFFIX)
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    os.utime(stale, (time.time() - 2 * 86400,) * 2)
    chunk = stale.parent / "chunk-1.json"
    chunk.write_text("{}")

    # when: more runs with work are recorded than the history keeps
    runs = [f"r{i:02d}" for i in range(PLAN_HISTORY + 3)]
    for run_id in runs:
        result = run(str(tmp_path / "mm2.properties"), config, flow, master="local[1]",
                     clusters=clusters(5), run_id=run_id)
        assert result.recorded["run_id"] == run_id
        assert result.planned is not None and result.planned.plan_path is not None
        # as an Airflow `copy` task's job leaves it: its `finish` reads Delta instead
        Path(result_path(result.planned.plan_path)).write_text("{}")

    # then: the newest plans are kept for inspection, the stale snapshot is gone, and the
    # backfill's chunk plans are left to their backfill
    kept = sorted(p.name for p in plans_dir(flow).glob("*.json"))
    assert kept == sorted([f"{r}.json" for r in runs[-PLAN_HISTORY:]]
                          + [f"{r}.result.json" for r in runs[-PLAN_HISTORY:]])
    assert len(jobs.plans) == len(runs)
    assert not stale.exists() and chunk.exists()


def test_a_run_is_recorded_from_its_jobs_result_without_reading_the_runs_table_back(
    config: Config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ferry.spark.submit, "run_copy", Jobs(records=4))
    monkeypatch.setattr("ferry.state.reader.rows",
                        lambda *_, **__: pytest.fail("the runs table was read back"))

    result = run(str(tmp_path / "mm2.properties"), config, config.flow("A->B"),
                 master="local[1]", clusters=clusters(5, 7), run_id="r1")

    assert result.ok
    assert result.recorded == {
        "run_id": "r1", "ranges": 2, "records": 8, "bytes": 80, "failed": [],
        "handed_over": [], "gaps": 0,
        "topics": {"orders": {"records": 8, "partitions": {"0": [0, 5], "1": [0, 7]}}}}


def test_a_job_that_left_no_result_is_recorded_from_the_state_last_attempt_first(
    config: Config, jobs: Jobs, tmp_path: Path
) -> None:
    # given: the runs table as a job retried by Airflow leaves it: partition 0 failed, then
    # copied on retry; partition 1 copied, then found committed (skipped) on retry
    def attempt(partition: int, outcome: RangeOutcome, records: int, minute: int
                ) -> dict[str, Any]:
        return {"flow": "A->B", "run_id": "r1", "topic": "orders", "partition": partition,
                "range_start": 0, "range_end": 5, "records": records, "bytes": records,
                "outcome": outcome, "finished_at": datetime(2026, 11, 29, 0, minute, tzinfo=UTC)}

    state = MemoryStore({"runs": [attempt(0, RangeOutcome.FAILED, 0, 1),
                                  attempt(1, RangeOutcome.COPIED, 5, 1),
                                  attempt(0, RangeOutcome.COPIED, 5, 2),
                                  attempt(1, RangeOutcome.SKIPPED, 0, 2)]})
    cycle = Cycle(config, config.flow("A->B"), "r1", clusters=clusters(5, 5), state=state)

    # when: the run is recorded with no result from its job (the DAG's `finish`)
    recorded = cycle.record(idle=False)

    # then: each range's last attempt that copied counts, once
    assert recorded == {"run_id": "r1", "ranges": 2, "records": 10, "bytes": 10,
                        "failed": [], "handed_over": [], "gaps": 0,
                        "topics": {"orders": {"records": 10,
                                              "partitions": {"0": [0, 5], "1": [0, 5]}}}}
    assert state.rows("lag", "A->B")  # and a point of the lag history, in the same state


class Runner:
    """A copy-runner port of its own: the cycle hands it the plan, and the plan file when it
    reads one (`reads_plan_file`), and nothing else."""

    def __init__(self, reads_plan_file: bool = True) -> None:
        self.reads_plan_file = reads_plan_file
        self.plans: list[tuple[str, str | None]] = []

    def run(self, plan: PlanFile, plan_path: str | None = None) -> Copied:
        self.plans.append((plan.run_id, plan_path))
        if plan_path is not None:  # the file holds the plan handed over
            assert json.loads(Path(plan_path).read_text())["run_id"] == plan.run_id
        return Copied(0, run_summary(plan.run_id, [], 0))


@pytest.mark.parametrize("reads_plan_file", [True, False], ids=["spark-reads-a-file",
                                                                 "local-is-handed-the-plan"])
def test_a_cycle_runs_its_copy_through_the_runner_it_is_given(
    config: Config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reads_plan_file: bool
) -> None:
    monkeypatch.setattr(ferry.spark.submit, "run_copy",
                        lambda *_: pytest.fail("Spark ran though a runner was given"))
    runner = Runner(reads_plan_file)
    cycle = Cycle(config, config.flow("A->B"), "r1", clusters=clusters(5), runner=runner)

    result = cycle.start()
    assert cycle.copy(result, str(tmp_path / "mm2.properties"))
    recorded = cycle.finish(result).recorded

    assert result.planned is not None and not result.planned.idle
    assert (result.planned.plan_path is not None) is reads_plan_file
    assert runner.plans == [("r1", result.planned.plan_path)]
    assert result.copied == recorded == run_summary("r1", [], 0)


@pytest.mark.parametrize(("setting", "looping", "planned", "starts_spark", "runner"), [
    ("auto", False, None, True, "spark"),     # a run of its own, before its plan
    ("auto", True, None, True, "local"),      # a continuous loop
    ("auto", True, 10**9, True, "local"),     # ... whatever it copies
    # a run of its own, its plan known: a small one copies here rather than start Spark
    ("auto", False, 100, True, "local"),
    ("auto", False, 1_000, True, "local"),    # at the limit
    ("auto", False, 1_001, True, "spark"),    # a backlog: Spark's
    ("auto", False, 100, False, "spark"),     # a warm Spark Connect server: started already
    ("local", False, None, True, "local"),
    ("local", False, 10**9, True, "local"),
    ("local", True, None, True, "local"),
    ("spark", False, 100, True, "spark"),
    ("spark", True, None, True, "spark"),
])
def test_the_copy_runner_is_chosen_by_ferry_copy_runner_the_loop_and_the_plans_size(
    setting: str, looping: bool, planned: int | None, starts_spark: bool, runner: str
) -> None:
    from ferry.core.runners import runner_for

    assert runner_for(setting, looping, planned, local_max=1_000,
                      starts_spark=starts_spark) == runner


@pytest.mark.parametrize("call", ["write_positions", "read_checkpoints", "write_checkpoints",
                                  "map_cursor", "map_entries"])
def test_a_flows_own_target_state_is_never_touched_through_another_cluster(
    config: Config, call: str
) -> None:
    from ferry.steps.clusters import Cluster

    flow = config.flow("A->B")
    source = Cluster(flow.source_admin)
    arguments = {"write_positions": ([],), "read_checkpoints": ("B.checkpoints.internal",),
                 "write_checkpoints": ("B.checkpoints.internal", []), "map_cursor": (),
                 "map_entries": (-1,)}[call]

    with pytest.raises(ValueError, match="cluster A is not the target of flow A->B"):
        result = getattr(source, call)(flow, *arguments)
        list(result or ())  # map_entries reads lazily


@pytest.mark.parametrize(("limit", "master", "runner"), [
    ("", "local[1]", "local"),                          # 12 offsets, spark-submit's start saved
    ("ferry.copy.local.max.records = 11\n", "local[1]", "spark"),   # over the limit: Spark
    ("", "sc://127.0.0.1:15002", "spark"),              # a warm Spark copies every plan
])
def test_a_run_of_its_own_copies_a_small_plan_itself_rather_than_start_spark(
    config_with: ConfigWith, jobs: Jobs, limit: str, master: str, runner: str
) -> None:
    # given: the default runner (auto), a plan of 12 offsets
    config = config_with(limit)
    cycle = Cycle(config, config.flow("A->B"), "r1", master=master, clusters=clusters(5, 0, 7))

    # when: the run is planned
    result = cycle.start()

    # then: the runner is chosen by the plan's size and the Spark it would start; a plan
    # file is written only for Spark's job
    assert result.planned is not None and result.planned.prepared.plan.span == 12
    assert cycle.copies_with == runner
    assert cycle.copies_in_process is (runner == "local" or master.startswith("sc://"))
    assert (result.planned.plan_path is not None) is (runner == "spark")

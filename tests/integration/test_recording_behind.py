"""A continuous loop's Delta recorder on real brokers and a real Delta table (delta-rs, the
loop's own appends): Delta failing for a while never stops the copies, and once it recovers
every `runs` row and offset-map row is in Delta exactly once. The lanes are the loop's kept
lanes (`KeptLanes`), so no Spark is needed."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ferry.core.internal import offset_map_topic
from ferry.core.tables import OFFSET_MAP_DDL, StatePaths
from ferry.runtime.kept_lanes import KeptLanes
from ferry.runtime.recorder import Recorder
from ferry.spark.copy_job import run_copy_job
from ferry.state.reader import rows
from ferry.state.writer import append
from ferry.steps.cycle import write_plan
from ferry.steps.plan import prepare
from tests.support.kafka_data import assert_exact, create_topic, flow_config, produce, read_all

pytestmark = pytest.mark.integration

CYCLES = 4


class FlakyDelta:
    """delta-rs's append, failing while `down` as a storage outage does: before anything
    is committed (`before`: the table's storage refuses the write), or after the commit
    landed and only its answer was lost (`after`: a timeout from an object store). `only`:
    fail only the appends to that table (by DDL); the others succeed."""

    def __init__(self, when: str, only: str | None = None) -> None:
        self.when, self.only = when, only
        self.down = threading.Event()
        self.down.set()
        self.failed = 0
        self._lock = threading.Lock()

    def __call__(self, path: str, ddl: str, rows_: list[dict[str, Any]],
                 once: tuple[str, int] | None = None) -> bool:
        failing = self.down.is_set() and rows_ and self.only in (None, ddl)
        if failing and self.when == "before":
            self._failed()
            raise OSError(28, f"No space left on device: {path}/_delta_log")
        appended = append(path, ddl, rows_, once)
        if failing:
            self._failed()
            raise TimeoutError(f"the commit to {path} was not acknowledged in time")
        return appended

    def _failed(self) -> None:
        with self._lock:
            self.failed += 1


@pytest.mark.parametrize(("when", "only"), [
    ("before", None),
    ("before", "offset map"),
    ("after", "offset map"),
    ("after", None),
], ids=["every-append-refused", "offset-map-appends-refused",
        "offset-map-commits-unacknowledged", "every-commit-unacknowledged"])
def test_delta_failing_under_a_continuous_loop_holds_no_copy_back_and_recovers_exactly_once(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, when: str, only: str | None
) -> None:
    # given: a loop's recorder (batches every second) whose Delta appends fail
    create_topic(clusters["source"], topic_name, 2)
    config = flow_config(tmp_path, clusters, topic_name,
                         "ferry.state.record.interval.seconds = 1\n")
    flow = config.enabled_flows[0]
    paths = StatePaths(flow.ferry.state_dir)
    delta = FlakyDelta(when, {None: None, "offset map": OFFSET_MAP_DDL}[only])
    recorder = Recorder(flow, append=delta, retry_s=0.1)
    lanes = KeptLanes(flow)
    try:
        # when: the loop copies cycle after cycle while Delta fails, each cycle's batch
        # tried (and failed) before the next cycle copies
        for cycle in range(CYCLES):
            produce(clusters["source"], topic_name,
                    [(None, f"c{cycle}-{i}".encode(), i % 2) for i in range(20)])
            plan = write_plan(flow, prepare(flow, run_id=f"cycle-{cycle}"))
            failed = delta.failed
            result = run_copy_job(None, config.path, flow, plan, recorder=recorder, kept=lanes)
            assert (result.records, result.failed) == (20, [])
            deadline = time.monotonic() + 60
            while delta.failed == failed:
                assert time.monotonic() < deadline, "no Delta batch was tried"
                time.sleep(0.05)
        if (when, only) == ("before", None):  # nothing of the copies reached Delta
            assert rows(paths.runs, flow.name) == rows(paths.offset_map, flow.name) == []

        # and Delta recovers: the loop's last batch as it stops
        delta.down.clear()
        recorder.close(120)
    finally:
        delta.down.clear()
        lanes.close()

    # then: every record is on the target once, and Delta holds every run's rows and
    # every offset-map entry exactly once
    assert_exact(flow, clusters, topic_name, 2)
    assert delta.failed >= CYCLES
    runs = Counter((r["run_id"], r["partition"], r["range_start"], r["range_end"],
                    r["records"], r["outcome"]) for r in rows(paths.runs, flow.name))
    assert runs == Counter({(f"cycle-{c}", p, 10 * c, 10 * c + 10, 10, "copied"): 1
                            for c in range(CYCLES) for p in (0, 1)})
    entries = [r.offset for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    recorded = Counter(r["map_offset"] for r in rows(paths.offset_map, flow.name))
    assert recorded == Counter(dict.fromkeys(entries, 1))
    assert len(entries) == 2 * CYCLES


class Held:
    """A copy job's recorder as the loop hands it its rows, holding them back until
    `release` (a cycle whose copy committed and whose job has not returned yet)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def begin(self, run_id: str) -> None:
        self.recorder.begin(run_id)

    def add(self, run_id: str, rows_: list[dict[str, Any]]) -> None:
        self.rows[run_id] = rows_

    def end(self, run_id: str) -> None:
        self.recorder.end(run_id)

    def release(self) -> None:
        for run_id, rows_ in self.rows.items():
            self.recorder.add(run_id, rows_)


class GatedDelta:
    """delta-rs's append, held before the offset map's append while `closed` (a batch that
    read the offset-map topic and has not committed yet); `waiting` is set once held."""

    def __init__(self) -> None:
        self.closed, self.waiting = threading.Event(), threading.Event()

    def __call__(self, path: str, ddl: str, rows_: list[dict[str, Any]],
                 once: tuple[str, int] | None = None) -> bool:
        if ddl == OFFSET_MAP_DDL and self.closed.is_set():
            self.waiting.set()
            deadline = time.monotonic() + 120
            while self.closed.is_set():
                assert time.monotonic() < deadline, "the test never opened the gate"
                time.sleep(0.02)
        return append(path, ddl, rows_, once)


def test_two_recorders_of_two_runs_at_a_turn_record_each_range_and_entry_once(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: at an @continuous turn, two processes' recorders: A (the earlier run's loop)
    # and B (the later run's), Delta batches an hour apart. A's cycle a0 is recorded, a1's
    # rows wait for A's next batch; B's cycle b and then A's cycle a2 commit their copies,
    # their rows not yet handed over
    create_topic(clusters["source"], topic_name, 2)
    config = flow_config(tmp_path, clusters, topic_name,
                         "ferry.state.record.interval.seconds = 3600\n")
    flow = config.enabled_flows[0]
    paths = StatePaths(flow.ferry.state_dir)
    gate = GatedDelta()
    earlier, later = Recorder(flow), Recorder(flow, append=gate)
    lanes_a, lanes_b = KeptLanes(flow), KeptLanes(flow)

    def cycle(run_id: str, recorder: Recorder | Held, lanes: KeptLanes) -> None:
        produce(clusters["source"], topic_name,
                [(None, f"{run_id}-{i}".encode(), i % 2) for i in range(20)])
        plan = write_plan(flow, prepare(flow, run_id=run_id))
        result = run_copy_job(None, config.path, flow, plan, recorder=recorder, kept=lanes)
        assert (result.records, result.failed) == (20, [])

    try:
        cycle("a0", earlier, lanes_a)
        earlier.flush(120)
        cycle("a1", earlier, lanes_a)  # its rows wait for A's next batch
        b, a2 = Held(later), Held(earlier)
        cycle("b", b, lanes_b)
        cycle("a2", a2, lanes_a)

        # when: B's first batch appends its runs rows, reads the offset-map topic (a1's, b's
        # and a2's entries: a2 is no run of B's process) and is held before its offset map;
        # meanwhile A's batch records a1's rows and the entries up to its own pending a2;
        # then B's batch commits, and A's last batch records a2's rows
        gate.closed.set()
        b.release()
        assert gate.waiting.wait(120), "B's batch never reached its offset map"
        earlier.flush(120)
        gate.closed.clear()
        later.close(120)
        a2.release()
        earlier.close(120)
    finally:
        gate.closed.clear()
        lanes_a.close()
        lanes_b.close()

    # then: each run's ranges are in runs once, and each entry in the offset map once
    runs = Counter((r["run_id"], r["partition"], r["records"], r["outcome"])
                   for r in rows(paths.runs, flow.name))
    entries = [r.offset for r in read_all(clusters["target"], offset_map_topic(flow), 0)
               if r.value is not None]
    recorded = Counter(r["map_offset"] for r in rows(paths.offset_map, flow.name))
    assert (runs, recorded) == (
        Counter({(run, p, 10, "copied"): 1 for run in ("a0", "a1", "b", "a2")
                 for p in (0, 1)}),
        Counter(dict.fromkeys(entries, 1)))

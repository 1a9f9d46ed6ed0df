"""Maintenance of real Delta state tables, written the way Ferry writes them: by Spark
(delta-spark 4.4.0, the copy job's own append) and by delta-rs (the steps without a JVM).
Compaction keeps every row, vacuum waits for the retention, and flows that write and read
while maintenance runs lose nothing."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ferry.core.offsetmap import MapEntry, Segment
from ferry.core.retention import CompactionPolicy, compaction_plan
from ferry.core.tables import (
    OFFSET_MAP_DDL,
    RUNS_DDL,
    SYNCS_DDL,
    StatePaths,
    offset_map_row,
)
from ferry.errors import UsageError
from ferry.spark.copy_job import _append_once as append_with_spark
from ferry.state import writer
from ferry.state.maintain import compact, data_files, maintain, maintain_table
from ferry.state.reader import rows
from tests.support.maintenance import FLOWS, files_per_flow, identities, sample_rows, state_config

# `append_with_spark` is a plain Spark append (the recording's keyed appends commit once per
# flow and keep each key once; what compaction keeps of what Spark wrote is the subject here)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SMALL = CompactionPolicy(min_small_files=3)








def offset_map_rows(run_ids: list[str]) -> list[dict[str, Any]]:
    now_ms = int(time.time() * 1000)
    found = []
    for flow in FLOWS:
        for n, run_id in enumerate(run_ids):
            entry = MapEntry(flow, run_id, 0, "orders", 0, "A.orders", 0, n * 10, n * 10 + 10,
                             (Segment(n * 10, n * 10, 10),), now_ms)
            found.append(offset_map_row(entry, "ferry-offset-map.A.internal", n))
    return found






def parquet_on_disk(path: str) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path).rglob("*.parquet")
            if "_delta_log" not in p.parts}


def wait_for(condition: Any, errors: list[BaseException], seconds: float = 300) -> None:
    """Wait until `condition()`. The bound is long: Spark appends go through the session's
    shared Connect server, whose cores another test's copy job may hold for minutes (in a
    suite run, a job whose lane tasks fail and run again held them 100 s)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert not errors, errors
        assert time.monotonic() < deadline, "the writers did not commit in time"
        time.sleep(0.05)


def test_delta_spark_writes_state_tables_delta_rs_can_rewrite(
        spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    path = str(tmp_path / "runs")
    append_with_spark(spark, sample_rows(RUNS_DDL, ["r0"]), RUNS_DDL, path)
    protocol = DeltaTable(path).protocol()
    # Protocol 1/2 without table features: delta-rs reads, compacts, vacuums and
    # checkpoints it. A delta-spark upgrade that turns features on shows up here first.
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert not protocol.writer_features and not protocol.reader_features


def test_compaction_keeps_every_row_of_tables_spark_and_delta_rs_wrote(
        spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    # given: six small appends per table, each with a row of both flows
    config = state_config(tmp_path)
    paths = StatePaths(config.enabled_flows[0].ferry.state_dir)
    run_ids = [f"r{i}" for i in range(6)]
    for run_id in run_ids:
        append_with_spark(spark, offset_map_rows([run_id]), OFFSET_MAP_DDL, paths.offset_map)
        append_with_spark(spark, sample_rows(RUNS_DDL, [run_id]), RUNS_DDL, paths.runs)
        writer.append(paths.syncs, SYNCS_DDL, sample_rows(SYNCS_DDL, [run_id]))
    written = {p: identities(p) for p in (paths.offset_map, paths.runs, paths.syncs)}
    versions = {p: DeltaTable(p).version() for p in written}
    assert all(files_per_flow(p)[flow] >= 6 for p in written for flow in FLOWS)

    # when: a dry run, then the real thing
    planned = maintain(config, 168, dry_run=True, policy=SMALL)
    assert {p: DeltaTable(p).version() for p in written} == versions
    done = maintain(config, 168, policy=SMALL)

    # then
    by_path = {t.path: t for t in done.tables}
    for path, before in written.items():
        assert identities(path) == before
        assert files_per_flow(path) == Counter(dict.fromkeys(FLOWS, 1))
        report = by_path[path]
        assert [c.partition for c in report.compacted] == sorted(FLOWS)
        assert all(c.files_after == 1 for c in report.compacted)
        assert report.files_after == 2 and report.files_before >= 12
        assert report.checkpointed and report.vacuumed_files == 0
        assert report.retention_hours == 168
    planned_paths = {t.path: t for t in planned.tables}
    assert all(planned_paths[p].compacted for p in written)
    assert not by_path[paths.gaps].present and not by_path[paths.verify].present
    # the log is checkpointed at the compaction, for readers to start from
    latest = DeltaTable(paths.runs).version()
    assert (Path(paths.runs) / "_delta_log" / f"{latest:020d}.checkpoint.parquet").exists()
    # Ferry's readers and Spark read the compacted tables; the copy job appends on
    assert {r["run_id"] for r in rows(paths.runs, "A->B")} == set(run_ids)
    assert spark.read.format("delta").load(paths.offset_map).count() == 12
    append_with_spark(spark, sample_rows(RUNS_DDL, ["after"]), RUNS_DDL, paths.runs)
    assert identities(paths.runs) == written[paths.runs] + Counter(
        {(f, "after"): 1 for f in FLOWS})
    # a second run finds nothing to do
    again = {t.path: t for t in maintain(config, 168, policy=SMALL).tables}
    assert not again[paths.offset_map].compacted and not again[paths.syncs].compacted


def test_vacuum_deletes_replaced_files_only_once_past_the_retention(
        spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    path = str(tmp_path / "runs")
    for run_id in ("r0", "r1", "r2", "r3"):
        append_with_spark(spark, sample_rows(RUNS_DDL, [run_id]), RUNS_DDL, path)
    before = identities(path)
    version = DeltaTable(path).version()
    replaced = parquet_on_disk(path)

    # when: compacted, vacuumed with a retention the replaced files have not reached
    kept = maintain_table(path, "runs", retention_hours=1, policy=SMALL)

    # then: nothing deleted, the old snapshot is still readable
    assert kept.compacted and kept.vacuumed_files == 0
    assert replaced < parquet_on_disk(path)
    assert identities(path, version) == before

    # when: past the retention (0: only tests go below the safe minimum)
    sidecars = {str(p.relative_to(path)) for p in Path(path).glob("flow=*/.*.crc")}
    size = sum(os.path.getsize(Path(path) / name) for name in replaced | sidecars)
    gone = maintain_table(path, "runs", retention_hours=0, policy=SMALL)

    # then: exactly the replaced files (and Spark's .crc sidecars) are deleted
    assert parquet_on_disk(path) == {f.path for f in data_files(DeltaTable(path))}
    assert not replaced & parquet_on_disk(path)
    assert gone.vacuumed_files == 2 * len(replaced) == len(replaced | sidecars)
    assert gone.vacuumed_bytes == size
    assert not list(Path(path).glob("flow=*/.*.crc"))  # Hadoop's checksums went with them
    # and a second vacuum finds nothing left, and commits nothing
    latest = DeltaTable(path).version()
    assert maintain_table(path, "runs", retention_hours=0, policy=SMALL).vacuumed_files == 0
    assert DeltaTable(path).version() == latest
    assert identities(path) == before
    with pytest.raises(Exception, match=r"(?i)not found|no such file"):
        DeltaTable(path, version=version).to_pyarrow_table()


def test_a_retention_below_the_safe_minimum_is_refused_before_anything_is_touched(
        tmp_path: Path) -> None:
    config = state_config(tmp_path)
    with pytest.raises(UsageError, match=r"retention 2 hours is below the safe minimum of 24 "
                                         r"hours .*set --retention-hours to 24 or more"):
        maintain(config, 2)
    with pytest.raises(UsageError, match="unknown state table nope"):
        maintain(config, 24, tables=("nope",))


def test_files_whose_tombstones_left_the_log_are_swept_once_old_enough(
        spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    # given: a table whose tombstones expire after one second, compacted
    path = str(tmp_path / "runs")
    append_with_spark(spark, sample_rows(RUNS_DDL, ["r0"]), RUNS_DDL, path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
              "('delta.deletedFileRetentionDuration' = 'interval 1 seconds')")
    for run_id in ("r1", "r2", "r3"):
        append_with_spark(spark, sample_rows(RUNS_DDL, [run_id]), RUNS_DDL, path)
    replaced = parquet_on_disk(path)
    assert maintain_table(path, "runs", 24, policy=SMALL).compacted
    time.sleep(1.5)
    # and Spark's next checkpoint dropped the expired tombstones: delta-rs's vacuum alone
    # would never delete those files
    while DeltaTable(path).version() % 10 != 0:
        append_with_spark(spark, sample_rows(RUNS_DDL, [f"x{time.monotonic_ns()}"]), RUNS_DDL,
                     path)
    assert DeltaTable(path).vacuum(retention_hours=0, dry_run=True,
                                   enforce_retention_duration=False) == []
    assert replaced <= parquet_on_disk(path)
    # and a data file written a moment ago by a writer that has not committed yet
    partition = next(Path(path).glob("flow=*"))
    in_flight = partition / "part-99999-in-flight.c000.snappy.parquet"
    in_flight.write_bytes(next(partition.glob("*.parquet")).read_bytes())
    before = identities(path)

    # when: the replaced files are two days old
    old = time.time() - 48 * 3600
    for name in replaced:
        os.utime(Path(path) / name, (old, old))
    report = maintain_table(path, "runs", 24, policy=SMALL)

    # then
    assert not replaced & parquet_on_disk(path)
    assert in_flight.exists()
    assert report.swept_files == len(replaced)
    assert identities(path) == before


def test_appends_that_commit_while_a_compaction_runs_are_kept(
        spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    # given: compaction planned on a snapshot...
    path = str(tmp_path / "runs")
    for run_id in ("r0", "r1", "r2", "r3"):
        append_with_spark(spark, sample_rows(RUNS_DDL, [run_id]), RUNS_DDL, path)
    snapshot = DeltaTable(path)
    read_at = snapshot.version()
    plan = compaction_plan(data_files(snapshot), SMALL)
    # ...then Spark and delta-rs append before it commits
    append_with_spark(spark, sample_rows(RUNS_DDL, ["spark-late"]), RUNS_DDL, path)
    writer.append(path, RUNS_DDL, sample_rows(RUNS_DDL, ["delta-rs-late"]))
    appended, latest = identities(path), DeltaTable(path).version()

    # when
    done, lost = compact(snapshot, plan, SMALL)

    # then: the compaction rebased over both appends, which are kept
    assert [c.partition for c in done] == sorted(FLOWS) and lost == ()
    assert identities(path) == appended
    first = min((c for c in DeltaTable(path).history() if c["operation"] == "OPTIMIZE"),
                key=lambda c: c["version"])
    assert (first["readVersion"], first["version"]) == (read_at, latest + 1)


def test_flows_writing_and_reading_during_maintenance_lose_nothing(
        spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    config = state_config(tmp_path)
    paths = StatePaths(config.enabled_flows[0].ferry.state_dir)
    append_with_spark(spark, sample_rows(RUNS_DDL, ["seed"]), RUNS_DDL, paths.runs)
    writer.append(paths.syncs, SYNCS_DDL, sample_rows(SYNCS_DDL, ["seed"]))
    held = {p: DeltaTable(p) for p in (paths.runs, paths.syncs)}  # a reader's old snapshot
    stop = threading.Event()
    errors: list[BaseException] = []
    written: dict[str, list[str]] = {paths.runs: ["seed"], paths.syncs: ["seed"]}
    seen: dict[str, list[int]] = {paths.runs: [], paths.syncs: []}

    def keep(work: Any) -> Any:
        def loop() -> None:
            n = 0
            while not stop.is_set():
                try:
                    work(n)
                except BaseException as exc:  # the test fails on anything raised
                    errors.append(exc)
                    return
                n += 1
        return threading.Thread(target=loop, daemon=True)

    def spark_writes(n: int) -> None:  # the copy job recording its runs
        append_with_spark(spark, sample_rows(RUNS_DDL, [f"s{n}"]), RUNS_DDL, paths.runs)
        written[paths.runs].append(f"s{n}")

    def delta_rs_writes(n: int) -> None:  # the sync step recording its steps
        writer.append(paths.syncs, SYNCS_DDL, sample_rows(SYNCS_DDL, [f"d{n}"]))
        written[paths.syncs].append(f"d{n}")
        time.sleep(0.05)

    def reads(_n: int) -> None:  # the planner, checkpoints and status reading
        for path in seen:
            seen[path].append(len(rows(path, "A->B")))

    threads = [keep(spark_writes), keep(delta_rs_writes), keep(reads)]
    for thread in threads:
        thread.start()
    policy = CompactionPolicy(min_small_files=2)
    try:
        for _ in range(3):
            for path in seen:
                # a compaction reads its snapshot once there is something to compact and
                # commits after the next append: the window a long compaction has
                wait_for(lambda p=path: min(files_per_flow(p)[f] for f in FLOWS) >= 2, errors)
                snapshot = DeltaTable(path)
                plan = compaction_plan(data_files(snapshot), policy)
                wait_for(lambda p=path, s=snapshot: DeltaTable(p).version() > s.version(),
                         errors)
                done, lost = compact(snapshot, plan, policy)
                assert done and lost == ()
            # and the whole of maintenance (checkpoint, vacuum, sweep) next to the writers
            maintain(config, 24, tables=("runs", "syncs"), policy=policy)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert not errors, errors
    for path in seen:
        assert any(c["operation"] == "OPTIMIZE" and c["readVersion"] < c["version"] - 1
                   for c in DeltaTable(path).history()), "no compaction committed over appends"
    for path, run_ids in written.items():
        assert identities(path) == Counter((f, r) for r in run_ids for f in FLOWS)
        # readers never saw rows disappear, and the old snapshot is still readable
        assert seen[path] == sorted(seen[path]) and seen[path]
        assert held[path].to_pyarrow_table().num_rows == 2


MAP_TOPIC = "ferry-offset-map.A.internal"


def map_entries(flow: str, run_id: str, partition: int, first: int, count: int,
                committed_ms: int, size: int = 3) -> list[MapEntry]:
    """`count` one-second transactions of `size` records of one partition, each followed
    by its commit marker on the target, from transaction `first` on."""
    return [MapEntry(flow, run_id, 0, "orders", partition, "A.orders", partition,
                     n * size, (n + 1) * size, (Segment(n * size, n * (size + 1), size),),
                     committed_ms + n * 1000, bytes=size * 100,
                     target_end=n * (size + 1) + size, source_id="S", target_id="T")
            for n in range(first, first + count)]


def map_table_rows(entries: list[MapEntry], first_offset: int) -> list[dict[str, Any]]:
    return [offset_map_row(e, MAP_TOPIC, first_offset + i, "MAP")
            for i, e in enumerate(entries)]


def answers(path: str, flow: str) -> dict[tuple[int, int], Any]:
    """Where each source offset of each partition went, as `ferry offsets` resolves it."""
    from ferry.core.offsetmap import covering, latest_cover
    from ferry.state.reader import map_rows

    by_partition: dict[int, list[Any]] = {}
    for row in map_rows(path, flow):
        by_partition.setdefault(row.entry.source_partition, []).append((row.offset, row.entry))
    found = {}
    for partition, keyed in by_partition.items():
        entries = latest_cover(keyed)
        for offset in range(entries[-1].covered_end + 2):
            hit = covering(entries, offset)
            found[partition, offset] = None if hit is None else (hit[0].run_id, hit[1])
    return found


def test_folding_the_offset_map_keeps_every_answer_and_every_writer_reads_it_as_recorded(
        spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    from ferry.spark.copy_job import _append as keyed_append_with_spark
    from ferry.state.reader import max_map_offsets

    # given: two hours ago a run recorded 120 one-second transactions of two partitions
    # (the recorder's delta-rs batches), a second run then re-copied a stretch of
    # partition 0 (an at_least_once crash), and the last minute's entries are recent
    config = state_config(tmp_path)
    path = StatePaths(config.enabled_flows[0].ferry.state_dir).offset_map
    flow = "A->B"
    old = int((time.time() - 7200) * 1000)
    p0, p1 = map_entries(flow, "r1", 0, 0, 60, old), map_entries(flow, "r1", 1, 0, 60, old)
    settled = [*p0[:40], *p1[:40]]
    rerun = [replace(e, run_id="r2", committed_at_ms=old + 100_000, segments=(
        Segment(e.covered_start, 1000 + e.covered_start, 3),)) for e in p0[10:12]]
    later = [*p0[40:], *p1[40:]]
    recorded = (map_table_rows(settled, 0) + map_table_rows(rerun, 80)
                + map_table_rows(later, 82))
    recent = map_table_rows(map_entries(flow, "r1", 0, 60, 5, int(time.time() * 1000)), 122)
    for batch in (recorded[:50], recorded[50:], recent):
        assert writer.append(path, OFFSET_MAP_DDL, batch)
    before, cursor = answers(path, flow), max_map_offsets(path, flow)
    assert before[0, 31] == ("r2", 1031) and before[0, 40] == ("r1", 53)

    # when: maintenance runs
    report = maintain_table(path, "offset_map", 168, policy=CompactionPolicy())

    # then: each run of adjacent entries is one row, the recent entries are as written
    assert [(f.partition, f.rows_before, f.rows_after) for f in report.folded] == [
        (flow, 122, 4)]
    # the report counts the files as maintenance found them: the three batches
    assert report.files_before == 3 and report.files_after < report.files_before
    table = DeltaTable(path).to_pyarrow_table().to_pylist()
    # partition 0: r1's entries up to r2's re-copy, r2's two, r1's after them (they do
    # not join r1's first row across r2's); partition 1: r1's, all one
    assert sorted((r["source_partition"], r["map_offset"], r["map_offset_end"], r["run_id"])
                  for r in table if r["map_offset_end"] is not None) == [
        (0, 0, 39, "r1"), (0, 80, 81, "r2"), (0, 82, 101, "r1"), (1, 40, 121, "r1")]
    assert len(table) == 4 + 5
    # every answer is the same, and so is where the recorder reads the topic on from
    assert answers(path, flow) == before
    assert max_map_offsets(path, flow) == cursor
    # both writers find every folded entry recorded, and append what is new
    assert not writer.append(path, OFFSET_MAP_DDL, recorded)
    assert not keyed_append_with_spark(spark, recorded[:30], OFFSET_MAP_DDL, path, None)
    fresh = map_table_rows(map_entries(flow, "r1", 0, 65, 1, int(time.time() * 1000)), 127)
    assert keyed_append_with_spark(spark, recent + fresh, OFFSET_MAP_DDL, path, None)
    assert len(DeltaTable(path).to_pyarrow_table().to_pylist()) == 10
    # a second run has nothing left to fold
    assert not maintain_table(path, "offset_map", 168, policy=CompactionPolicy()).folded


def test_a_fold_that_another_writer_overtook_changes_nothing_and_is_retried(
        tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from deltalake import DeltaTable

    from ferry.state.coalesce import fold_offset_map

    path = str(tmp_path / "offset_map")
    old = int((time.time() - 7200) * 1000)
    assert writer.append(path, OFFSET_MAP_DDL,
                         map_table_rows(map_entries("A->B", "r1", 0, 0, 20, old), 0))
    # given: a fold read its snapshot, then the recorder appended a batch
    snapshot = DeltaTable(path)
    late = map_table_rows(map_entries("A->B", "r1", 0, 20, 1, int(time.time() * 1000)), 20)
    assert writer.append(path, OFFSET_MAP_DDL, late)
    written = DeltaTable(path).to_pyarrow_table().num_rows

    # when: the fold commits on its snapshot
    settled = datetime.now(UTC) - timedelta(hours=1)
    folded, lost = fold_offset_map(path, settled, snapshot=snapshot)

    # then: it lost to the recorder's commit; nothing changed; the next run folds
    assert (folded, lost) == ((), ("A->B",))
    assert DeltaTable(path).to_pyarrow_table().num_rows == written == 21
    folded, lost = fold_offset_map(path, settled)
    assert [(f.rows_before, f.rows_after) for f in folded] == [(20, 1)] and lost == ()

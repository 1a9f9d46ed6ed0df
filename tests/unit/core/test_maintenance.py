"""Maintenance decisions: which tables and state directories, which partitions to compact,
how long replaced files are kept, which stray files may go, and the report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.config import load_config
from ferry.core.retention import (
    SAFE_MINIMUM_RETENTION_HOURS,
    WHOLE_TABLE,
    CompactedPartition,
    CompactionPolicy,
    DataFile,
    FoldedPartition,
    MaintenanceReport,
    PartitionPlan,
    StoredFile,
    TableReport,
    check_retention,
    compaction_plan,
    effective_retention,
    state_dirs,
    state_tables,
    sweep,
    table_retention_hours,
    unlisted,
)
from ferry.core.tables import StatePaths
from ferry.errors import UsageError

# -- which tables, which directories -------------------------------------------------------


def test_every_state_table_declared_in_state_paths_is_maintained() -> None:
    tables = state_tables()
    assert tables[:6] == ("offset_map", "runs", "gaps", "incidents", "syncs", "checkpoints")
    assert all(StatePaths("/s").table(t) == getattr(StatePaths("/s"), t) for t in tables)


def test_a_table_added_to_state_paths_is_maintained_and_other_properties_are_not() -> None:
    @dataclass(frozen=True)
    class MorePaths(StatePaths):
        @property
        def audit(self) -> str:
            return self.table("audit")

        @property
        def label(self) -> str:  # a property that is no table of its own name
            return self.root.upper()

    assert state_tables(MorePaths) == (*state_tables(), "audit")
    assert "label" not in state_tables(MorePaths)


def test_state_dirs_are_the_distinct_dirs_of_enabled_flows(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = A, B, C\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\n"
        "C.bootstrap.servers = c:9092\nA->B.enabled = true\nC->B.enabled = true\n"
        "B->C.enabled = false\nB->C.ferry.state.dir = /never/used\n"
        "ferry.state.dir = state\nC->B.ferry.state.dir = /elsewhere\n")
    # sorted, wherever tmp_path is
    assert state_dirs(load_config(path)) == tuple(sorted(("/elsewhere",
                                                          str(tmp_path / "state"))))


# -- retention -----------------------------------------------------------------------------


@pytest.mark.parametrize("hours", [SAFE_MINIMUM_RETENTION_HOURS, 168, 10_000],
                         ids=["the minimum", "delta default", "long"])
def test_a_retention_at_or_above_the_safe_minimum_is_accepted(hours: int) -> None:
    assert check_retention(hours) == hours


@pytest.mark.parametrize("hours", [0, 1, SAFE_MINIMUM_RETENTION_HOURS - 1, -5],
                         ids=["zero", "one hour", "just below", "negative"])
def test_a_retention_below_the_safe_minimum_is_refused_naming_value_and_fix(hours: int) -> None:
    with pytest.raises(UsageError) as err:
        check_retention(hours, option="--retention-hours")
    message = str(err.value)
    assert "\n" not in message
    assert f"retention {hours} hours" in message
    assert f"set --retention-hours to {SAFE_MINIMUM_RETENTION_HOURS} or more" in message


@pytest.mark.parametrize(("setting", "hours"), [
    ("interval 7 days", 168.0),
    ("interval 1 week", 168.0),
    ("interval 36 hours", 36.0),
    ("INTERVAL 30 MINUTES", 0.5),
    ("interval 2 seconds", 2 / 3600),
    (None, None),
    ("seven days", None),
    ("interval 3 fortnights", None),
], ids=["days", "week", "hours", "upper case", "seconds", "unset", "no interval", "unit"])
def test_the_tables_own_tombstone_retention_is_read_from_its_property(
        setting: str | None, hours: float | None) -> None:
    configuration = {} if setting is None else {"delta.deletedFileRetentionDuration": setting}
    assert table_retention_hours(configuration) == hours


@pytest.mark.parametrize(("requested", "setting", "effective"), [
    (168, None, 168),
    (24, None, 24),
    (24, "interval 30 days", 720),
    (168, "interval 1 days", 168),
    (24, "interval 90 minutes", 24),
    (0, "interval 2 seconds", 1),
], ids=["default", "short, table silent", "table keeps longer", "table shorter",
        "minutes", "seconds round up"])
def test_a_table_that_keeps_files_longer_than_asked_keeps_its_own_retention(
        requested: int, setting: str | None, effective: int) -> None:
    configuration = {} if setting is None else {"delta.deletedFileRetentionDuration": setting}
    assert effective_retention(requested, configuration) == effective


# -- compaction plan -----------------------------------------------------------------------

KIB, MIB = 1024, 1024 * 1024


def files(partition: str | None, *sizes: int) -> list[DataFile]:
    return [DataFile(f"flow={partition}/part-{i}-{size}.parquet", size, partition)
            for i, size in enumerate(sizes)]


POLICY = CompactionPolicy(min_small_files=3, target_bytes=64 * MIB)


@pytest.mark.parametrize(("found", "planned"), [
    ([], ()),
    (files("A->B", 4 * KIB, 4 * KIB), ()),
    (files("A->B", 4 * KIB, 4 * KIB, 4 * KIB),
     (PartitionPlan("A->B", 3, 3, 12 * KIB),)),
    (files("A->B", 64 * MIB, 64 * MIB, 64 * MIB, 1 * KIB), ()),
    (files("A->B", 90 * MIB, 1 * KIB, 1 * KIB, 1 * KIB),
     (PartitionPlan("A->B", 4, 3, 90 * MIB + 3 * KIB),)),
    (files("C->B", *[KIB] * 5) + files("A->B", KIB) + files("B->A", *[KIB] * 3),
     (PartitionPlan("B->A", 3, 3, 3 * KIB), PartitionPlan("C->B", 5, 5, 5 * KIB))),
    (files(WHOLE_TABLE, KIB, KIB, KIB), (PartitionPlan(WHOLE_TABLE, 3, 3, 3 * KIB),)),
    (files(None, KIB, KIB, KIB), ()),
], ids=["empty table", "too few small files", "enough small files", "large files only",
        "large files count but are not small", "only the partitions that need it, by name",
        "a table not partitioned by flow", "rows without a flow"])
def test_a_partition_is_compacted_once_it_has_enough_small_files(
        found: list[DataFile], planned: tuple[PartitionPlan, ...]) -> None:
    assert compaction_plan(found, POLICY) == planned


def test_a_single_small_file_is_never_compacted_whatever_the_policy() -> None:
    assert compaction_plan(files("A->B", KIB), CompactionPolicy(min_small_files=1)) == ()


# -- sweeping stray files ------------------------------------------------------------------

NOW = 1_000_000_000.0
HOUR = 3600.0
OLD, YOUNG = NOW - 48 * HOUR, NOW - 1 * HOUR


def stored(path: str, modified: float) -> StoredFile:
    return StoredFile(path, 100, modified)


@pytest.mark.parametrize(("file", "swept"), [
    (stored("flow=A->B/live.parquet", OLD), False),
    (stored("flow=A->B/tombstone.parquet", OLD), False),
    (stored("flow=A->B/stray.parquet", OLD), True),
    (stored("stray-unpartitioned.parquet", OLD), True),
    (stored("flow=A->B/in-flight.parquet", YOUNG), False),
    (stored("_delta_log/00000000000000000000.json", OLD), False),
    (stored("_delta_log/00000000000000000010.checkpoint.parquet", OLD), False),
    (stored("_staged_commits/x.parquet", OLD), False),
    (stored("flow=A->B/.hidden/x.parquet", OLD), False),
    (stored("flow=A->B/notes.txt", OLD), False),
    (stored("flow=A->B/_SUCCESS", OLD), False),
    (stored("flow=A->B/.live.parquet.crc", OLD), False),
    (stored("flow=A->B/.tombstone.parquet.crc", OLD), False),
    (stored("flow=A->B/.stray.parquet.crc", OLD), True),
    (stored("flow=A->B/.expired.parquet.crc", OLD), True),
    (stored("flow=A->B/.long-gone.parquet.crc", OLD), True),
    (stored("flow=A->B/.long-gone.parquet.crc", YOUNG), False),
], ids=["referenced", "tombstone (vacuum decides)", "stray past retention",
        "stray in an unpartitioned table", "young: a write not committed yet",
        "the log", "a checkpoint", "staged commits", "hidden directory", "not a data file",
        "marker file", "sidecar of a live file", "sidecar of a kept tombstone",
        "sidecar of a swept stray", "sidecar of a tombstone vacuum deletes",
        "sidecar of a file gone long ago", "young sidecar"])
def test_only_old_data_files_no_snapshot_knows_are_swept(file: StoredFile, swept: bool) -> None:
    listing = [file, stored("flow=A->B/live.parquet", OLD),
               stored("flow=A->B/tombstone.parquet", OLD),
               stored("flow=A->B/stray.parquet", OLD),
               stored("flow=A->B/expired.parquet", OLD)]
    found = sweep(listing, referenced={"flow=A->B/live.parquet"},
                  tombstones={"flow=A->B/tombstone.parquet", "flow=A->B/expired.parquet"},
                  vacuumed={"flow=A->B/expired.parquet"}, now=NOW, retention_hours=24)
    assert (file in found) is swept


def test_the_sweep_keeps_what_is_younger_than_the_retention_to_the_second() -> None:
    edge = stored("flow=A->B/stray.parquet", NOW - 24 * HOUR)
    older = stored("flow=A->B/older.parquet", NOW - 24 * HOUR - 1)
    assert sweep([edge, older], set(), set(), set(), NOW, 24) == [older]


def test_referenced_files_missing_from_the_listing_are_named() -> None:
    listing = [stored("flow=A->B/a.parquet", OLD)]
    assert unlisted(listing, ["flow=A->B/a.parquet", "flow=A-%3EB/b.parquet"]) == [
        "flow=A-%3EB/b.parquet"]
    assert unlisted(listing, ["flow=A->B/a.parquet"]) == []


# -- the report ----------------------------------------------------------------------------

DONE = TableReport(
    table="runs", path="/s/runs", files_before=40, files_after=2, bytes_before=80 * KIB,
    bytes_after=20 * KIB, compacted=(CompactedPartition("A->B", 20, 1),
                                     CompactedPartition("C->B", 19, 1)),
    vacuumed_files=12, vacuumed_bytes=3 * MIB, swept_files=2, retention_hours=168,
    checkpointed=True)


def test_the_report_text_says_per_table_what_was_compacted_and_vacuumed() -> None:
    report = MaintenanceReport(168, False, (DONE, TableReport("lag", "/s/lag", present=False)))
    assert report.text() == (
        "retention 168h\n"
        "/s/runs: 40 files (80.0 KiB) -> 2 files (20.0 KiB); compact A->B (20 -> 1), "
        "C->B (19 -> 1); vacuum remove 12 files (3.0 MiB) older than 168h, 2 of them stray\n"
        "/s/lag: no table yet")


def test_a_dry_run_report_says_what_would_be_done() -> None:
    planned = TableReport("runs", "/s/runs", files_before=40, files_after=40,
                          compacted=(CompactedPartition("A->B", 20, None),),
                          vacuumed_files=3, vacuumed_bytes=500)
    report = MaintenanceReport(168, True, (planned,))
    assert report.text() == (
        "retention 168h (dry run: nothing changed)\n"
        "/s/runs: 40 files (0 B); would compact A->B (20 files); vacuum would remove 3 files "
        "(500 B) older than 168h")


def test_conflicts_and_warnings_are_in_the_text() -> None:
    table = TableReport("runs", "/s/runs", conflicts=("A->B",), warnings=("odd paths",))
    text = table.text()
    assert "nothing to compact" in text
    assert "compaction lost to a concurrent change, retried next run: A->B" in text
    assert text.endswith("\n  warning: odd paths")


def test_the_report_json_has_totals_and_every_table() -> None:
    data = MaintenanceReport(168, False, (DONE, DONE)).to_json()
    assert (data["files_before"], data["files_after"], data["vacuumed_files"]) == (80, 4, 24)
    assert data["vacuumed_bytes"] == 6 * MIB and data["dry_run"] is False
    assert data["tables"][0]["compacted"][0] == {"partition": "A->B", "files_before": 20,
                                                 "files_after": 1}
    assert data["tables"][0]["path"] == "/s/runs"


def test_the_report_says_which_flows_offset_maps_were_folded_and_which_lost_a_race() -> None:
    table = TableReport("offset_map", "/s/offset_map", files_before=3, files_after=1,
                        folded=(FoldedPartition("A->B", 345_600, 96),),
                        fold_conflicts=("C->B",))
    text = table.text()
    assert "fold the settled offset-map entries of A->B (345600 -> 96 rows)" in text
    assert "folding lost to a concurrent writer, retried next run: C->B" in text
    assert "would fold" in table.text(dry_run=True)
    data = MaintenanceReport(168, False, (table,)).to_json()
    assert data["tables"][0]["folded"] == [{"partition": "A->B", "rows_before": 345_600,
                                            "rows_after": 96}]
    assert data["tables"][0]["fold_conflicts"] == ["C->B"]
    assert json.loads(json.dumps(data)) == data


def test_the_report_json_is_plain_json_without_tuples() -> None:
    data = MaintenanceReport(168, False, (DONE,)).to_json()
    assert json.loads(json.dumps(data)) == data
    assert isinstance(data["tables"][0]["compacted"], list)
    assert isinstance(data["tables"][0]["warnings"], list)

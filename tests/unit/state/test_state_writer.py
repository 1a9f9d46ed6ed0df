"""Appends to the Delta state without a JVM (delta-rs): across Ferry versions, a release
that adds a column appends to a table an older release wrote, the older rows reading the
new column as null (docs/upgrade.md); and the idempotent appends a continuous loop's
recorder makes, which write a version of an application once, even racing another
writer of it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from ferry.core.tables import (
    CHECKPOINTS_DDL,
    GAPS_DDL,
    INCIDENTS_DDL,
    LAG_DDL,
    OFFSET_MAP_DDL,
    RUNS_DDL,
    SYNCS_DDL,
    VERIFY_DDL,
)
from ferry.state.writer import append, arrow_schema

DELTA_RS_TABLES = {"lag": LAG_DDL, "syncs": SYNCS_DDL, "verify": VERIFY_DDL,
                   "checkpoints": CHECKPOINTS_DDL, "gaps": GAPS_DDL, "incidents": INCIDENTS_DDL,
                   "runs": RUNS_DDL, "offset_map": OFFSET_MAP_DDL}


def row(ddl: str, run_id: str) -> dict[str, object]:
    """A row of every column of `ddl` (the offset map's segments: one segment)."""
    import pyarrow as pa

    values = {pa.string(): "x", pa.int32(): 1, pa.int64(): 1, pa.float64(): 1.0,
              pa.bool_(): True, pa.timestamp("us", tz="UTC"): datetime.now(UTC)}
    segment = {"source_start": 0, "target_start": 0, "count": 1}
    found = {field.name: [segment] if pa.types.is_list(field.type) else values[field.type]
             for field in arrow_schema(ddl)} | {"flow": "A->B", "run_id": run_id}
    if "map_offset_end" in found:  # an entry as a writer records it, not a folded one
        found["map_offset_end"] = None
    return found


@pytest.mark.parametrize("table", sorted(DELTA_RS_TABLES))
def test_a_table_an_older_release_wrote_takes_the_rows_of_a_release_with_a_new_column(
    tmp_path: Path, table: str
) -> None:
    # given: the table as a release without its last column wrote it
    ddl = DELTA_RS_TABLES[table]
    older = ddl.rsplit(", ", 1)[0]
    new_column = ddl.rsplit(", ", 1)[1].split(" ")[0]
    path = str(tmp_path / table)
    append(path, older, [row(older, "old")])

    # when: this release appends its rows (an offset-map row of another entry: the old one
    # holds its key)
    append(path, ddl, [row(ddl, "new") | ({"map_offset": 2, "map_offset_end": 2}
                                          if table == "offset_map" else {})])

    # then: both are there; the older row has no value for the new column
    found = {r["run_id"]: r for r in DeltaTable(path).to_pyarrow_table().to_pylist()}
    assert set(found) == {"old", "new"}
    assert found["old"][new_column] is None and found["new"][new_column] is not None


def _run_ids(path: str) -> list[str]:
    return sorted(r["run_id"] for r in DeltaTable(path).to_pyarrow_table().to_pylist())


@pytest.mark.parametrize(("versions", "written", "kept"), [
    ([5], [True], ["v5"]),
    ([5, 5], [True, False], ["v5"]),  # the same version again: nothing appended
    ([5, 4], [True, False], ["v5"]),  # an older one: nothing appended
    ([5, 6], [True, True], ["v5", "v6"]),
])
def test_an_idempotent_append_writes_each_version_of_an_application_once(
    tmp_path: Path, versions: list[int], written: list[bool], kept: list[str]
) -> None:
    path = str(tmp_path / "runs")
    done = [append(path, RUNS_DDL, [row(RUNS_DDL, f"v{v}")], once=("ferry.test", v))
            for v in versions]
    assert done == written
    assert _run_ids(path) == kept
    assert DeltaTable(path).transaction_version("ferry.test") == max(versions)


def test_an_idempotent_append_that_another_writer_of_its_application_overtook_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a table, and another writer of the same application and version that commits
    # between this append's read of the table and its commit
    import deltalake

    def entry(run_id: str, map_offset: int) -> dict[str, object]:
        return row(OFFSET_MAP_DDL, run_id) | {"map_offset": map_offset}

    path = str(tmp_path / "offset_map")
    append(path, OFFSET_MAP_DDL, [entry("before", 1)])
    write = deltalake.write_deltalake

    def overtaken(*args: object, **kwargs: object) -> None:
        monkeypatch.setattr(deltalake, "write_deltalake", write)
        assert append(path, OFFSET_MAP_DDL, [entry("other", 2)], once=("ferry.test", 7))
        write(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(deltalake, "write_deltalake", overtaken)

    # when: this append commits
    done = append(path, OFFSET_MAP_DDL, [entry("this", 3)], once=("ferry.test", 7))

    # then: it was refused; the rows are there once, the other writer's
    assert done is False
    assert _run_ids(path) == ["before", "other"]


def test_a_keyed_append_takes_only_the_rows_whose_key_the_table_lacks(tmp_path: Path) -> None:
    # given: an offset map holding topic offsets 1 and 2 of one incarnation
    def entry(map_offset: int, map_topic_id: str = "m1") -> dict[str, object]:
        return row(OFFSET_MAP_DDL, f"r{map_offset}") | {"map_offset": map_offset,
                                                         "map_topic_id": map_topic_id}

    path = str(tmp_path / "offset_map")
    assert append(path, OFFSET_MAP_DDL, [entry(1), entry(2)])

    # when: a second recorder appends 1 to 3 (and 2 of a recreated topic), then again
    second = append(path, OFFSET_MAP_DDL, [entry(1), entry(2), entry(3), entry(2, "m2")])
    third = append(path, OFFSET_MAP_DDL, [entry(3), entry(1)])

    # then: each place in the topic once
    assert (second, third) == (True, False)
    places = sorted((r["map_topic_id"], r["map_offset"])
                    for r in DeltaTable(path).to_pyarrow_table().to_pylist())
    assert places == [("m1", 1), ("m1", 2), ("m1", 3), ("m2", 2)]


def test_a_keyed_append_overtaken_by_another_writer_of_the_same_keys_reads_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: another recorder that appends offsets 1 and 2 between this append's read of
    # the keys and its commit
    import deltalake

    def entry(map_offset: int) -> dict[str, object]:
        return row(OFFSET_MAP_DDL, f"r{map_offset}") | {"map_offset": map_offset,
                                                         "map_topic_id": "m1"}

    path = str(tmp_path / "offset_map")
    append(path, OFFSET_MAP_DDL, [entry(0)])
    write = deltalake.write_deltalake

    commits: list[int] = []

    def overtaken(*args: object, **kwargs: object) -> None:
        if not commits:
            monkeypatch.setattr(deltalake, "write_deltalake", write)
            assert append(path, OFFSET_MAP_DDL, [entry(1), entry(2)])
        commits.append(args[1].num_rows)  # type: ignore[attr-defined]
        write(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(deltalake, "write_deltalake", overtaken)

    # when: this append of 1 to 3 commits
    assert append(path, OFFSET_MAP_DDL, [entry(1), entry(2), entry(3)])

    # then: its commit of three rows was refused, and its second attempt appended only 3
    assert commits == [3, 1]
    offsets = sorted(r["map_offset"] for r in DeltaTable(path).to_pyarrow_table().to_pylist())
    assert offsets == [0, 1, 2, 3]

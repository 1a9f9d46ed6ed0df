"""Spark with Delta (the session's warm Spark Connect server, where copy jobs run) writes
tables delta-rs reads without a JVM (the fast path for look-ups); the Spark settings take
the jars the setup fetched."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_spark_writes_a_partitioned_delta_table_that_deltalake_reads(
    spark: SparkSession, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    path = str(tmp_path / "offset_map_smoke")
    rows = [("A->B", "orders", 0, 0, 10), ("A->B", "orders", 1, 0, 5)]
    frame = spark.createDataFrame(rows, "flow string, topic string, partition int, "
                                        "start long, end long")
    frame.write.format("delta").partitionBy("flow").save(path)
    frame.limit(1).write.format("delta").mode("append").save(path)

    table = DeltaTable(path)
    assert table.version() == 1
    got = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: (r["partition"],
                                                                      r["start"]))
    assert len(got) == 3
    assert got[-1] == {"flow": "A->B", "topic": "orders", "partition": 1, "start": 0, "end": 5}
    assert DeltaTable(path, version=0).to_pyarrow_table().num_rows == 2


def test_spark_conf_turns_speculation_off_and_uses_local_jars() -> None:
    from ferry.spark.session import delta_classpath, spark_conf

    conf = spark_conf("local[2]")
    assert conf["spark.speculation"] == "false"
    jars = delta_classpath()
    assert any("delta-spark_4.2_2.13-4.4.0.jar" in j for j in jars)
    assert not any("hadoop-client" in j or "scala-library" in j for j in jars)
    assert conf["spark.jars"] == ",".join(jars)


def test_two_jobs_first_appends_into_one_fresh_state_folder_both_land(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two flows sharing a state folder, their first jobs at once: both appends find no
    table, one creates it, and the other's commit is refused by Delta (the table appeared
    meanwhile, DELTA_PROTOCOL_CHANGED). The loser appends again to the table now there,
    instead of failing its run. Both start together, several times over (each round a new
    folder), so the race is met rather than hoped for."""
    import threading

    from deltalake import DeltaTable

    from ferry.spark.copy_job import _append

    ddl = "flow string, n long"
    for round_ in range(4):
        path = str(tmp_path / f"runs-{round_}")
        start, failures = threading.Barrier(2), list[BaseException]()

        def first_append(flow: str, path: str = path, start: threading.Barrier = start,
                         failures: list[BaseException] = failures) -> None:
            start.wait()
            try:
                assert _append(spark, [{"flow": flow, "n": i} for i in range(50)], ddl, path)
            except BaseException as exc:  # reported below, with its round
                failures.append(exc)

        threads = [threading.Thread(target=first_append, args=(f"edge{i}->central",))
                   for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)

        assert not failures, f"round {round_}: {str(failures[0])[:500]}"
        found = DeltaTable(path).to_pyarrow_table().to_pylist()
        assert sorted((r["flow"], r["n"]) for r in found) == sorted(
            (f"edge{i}->central", n) for i in range(2) for n in range(50))


@pytest.mark.parametrize(("table", "added_later"), [
    ("runs", ["duplicates"]),
    ("offset_map", ["target_end", "source_topic_id", "target_topic_id", "map_topic_id",
                    "map_offset_end"]),
])
def test_the_copy_jobs_append_adds_a_new_releases_columns_to_a_table_an_older_one_wrote(
    spark: SparkSession, tmp_path: Path, table: str, added_later: list[str]
) -> None:
    from deltalake import DeltaTable

    from ferry.core.tables import OFFSET_MAP_DDL, RUNS_DDL
    from ferry.spark.copy_job import _append

    # given: the table as a release without the columns added later wrote it (Spark appends)
    ddl = {"runs": RUNS_DDL, "offset_map": OFFSET_MAP_DDL}[table]
    older = ", ".join(c for c in ddl.split(", ") if c.split(" ")[0] not in added_later)
    path = str(tmp_path / table)
    assert _append(spark, [_row(older, "old")], older, path)

    # when: this release's copy job appends its rows
    assert _append(spark, [_row(ddl, "new")], ddl, path)

    # then: both are there; the older row reads the new columns as null
    found = {r["run_id"]: r for r in DeltaTable(path).to_pyarrow_table().to_pylist()}
    assert set(found) == {"old", "new"}
    assert all(found["old"][c] is None and found["new"][c] is not None for c in added_later)
    assert found["old"]["records"] == found["new"]["records"] == 1


def _row(ddl: str, run_id: str) -> dict[str, object]:
    """A row of every column of `ddl` (`name type, ...`), each set to a value of its type."""
    from datetime import UTC, datetime

    values: dict[str, object] = {"string": "x", "int": 1, "bigint": 1, "double": 1.0,
                                 "boolean": True, "timestamp": datetime.now(UTC)}
    columns = [c.split(" ", 1) for c in ddl.split(", ")]
    return {name: ([] if kind.startswith("array<") else values[kind])
            for name, kind in columns} | {"flow": "A->B", "run_id": run_id}

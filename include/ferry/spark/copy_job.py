"""The copy job on Spark: one Spark task per lane, then the run recorded in Delta with
Spark (adapter).

`spark.range(n, numPartitions=n)` gives exactly one row, hence one task, per lane, and
`mapInArrow` runs the lane there (DataFrame API only, so Spark Connect can run it too). A
lane runs the writers of its writer slots one after another (`ferry.runtime.slots`; a
slot's transactional id is fixed by the flow and the partition, never by the lane count).
Each task loads the config itself from its path: secrets never travel in Spark's task
closures. The job's shape (gaps, lanes, recording, report) is the runners' common one,
`ferry.runtime.job.copy_plan`; what is Spark's here is where the lanes run (`SparkLanes`)
and how rows are appended (`spark_append`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ferry.config import Flow, load_config
from ferry.config.connections import snapshot_lookup
from ferry.core import plan_file
from ferry.core.job import Copied
from ferry.core.planner import Range
from ferry.core.tables import RUNS_DDL, RunRow, absent, keyed_table
from ferry.core.takeover import Named
from ferry.errors import FerryError
from ferry.runtime.job import JobResult, copy_plan, reported
from ferry.runtime.slots import name_newest, write_slots
from ferry.state.reader import transaction_version
from ferry.state.writer import arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from ferry.runtime.job import RunsLanes
    from ferry.runtime.recording import Append, RecordsBehind

log = logging.getLogger(__name__)


def lane_task(config_path: str, plan_path: str, flow_name: str, run_id: str,
              writers: dict[int, list[Range]], lanes: list[list[int]], role: str,
              owner: Named | None, batches: Iterator[pa.RecordBatch]
              ) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark task: for each input row (a lane), run the writers of its slots one
    after another and yield their `runs` rows. (Side by side in threads, they contended
    for the worker's interpreter: a warm cycle of 300k records took 10.9 s, not 6.7 s.)"""
    import pyarrow as pa

    import ferry
    from ferry import logs

    logs.setup()
    logging.getLogger("ferry.lane").info("ferry library loaded from %s", ferry.__file__)
    flow = load_config(config_path, flow=flow_name,
                       connection_lookup=snapshot_lookup(plan_path)).flow(flow_name)
    for batch in batches:
        for index in batch.column(0).to_pylist():
            rows = write_slots(flow, run_id, [(slot, writers[slot]) for slot in lanes[index]],
                               role, owner=owner)
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema(RUNS_DDL))


@dataclass(frozen=True)
class SparkLanes:
    """A job's lanes as Spark tasks on `spark` (`ferry.runtime.job.RunsLanes`); each task
    loads the flow from `config_path` (and the connections' snapshot beside `plan_path`)."""

    spark: SparkSession
    config_path: str
    plan_path: str

    def copy(self, flow: Flow, run_id: str, writers: dict[int, list[Range]],
             lanes: list[list[int]], role: str, owner: Named | None = None,
             topics: Collection[str] = ()) -> list[RunRow]:
        from functools import partial

        name_newest(flow, run_id, role, owner)
        frame = self.spark.range(0, len(lanes), 1, len(lanes))
        task = partial(lane_task, self.config_path, self.plan_path, flow.name, run_id,
                       writers, lanes, role, owner)
        # As Arrow: timestamps stay UTC-aware (collect() gives local wall-clock times).
        return list(frame.mapInArrow(task, RUNS_DDL).toArrow().to_pylist())


CREATED_MEANWHILE = ("DELTA_PROTOCOL_CHANGED", "ProtocolChangedException",
                     "DELTA_METADATA_CHANGED", "MetadataChangedException")
"""Delta's answers to an append that lost a race to create or change the table: another
job (another flow's, sharing the state folder) created it, or evolved its schema, first."""
CREATE_ATTEMPTS = 3


def spark_append(spark: SparkSession) -> Append:
    """Appends through `spark` (`_append`)."""
    return lambda path, ddl, rows, once: _append(spark, rows, ddl, path, once)


def _append(spark: SparkSession, rows: list[dict[str, Any]], ddl: str, path: str,
            once: tuple[str, int] | None = None) -> bool:
    """Append `rows`. With `once` = (application id, version), Delta's idempotent writes:
    the append is skipped when a write of that application with that version or a later
    one was committed already, and a concurrent one of the same application fails instead
    of committing twice. Returns False when nothing was written for that reason. The
    offset map's and `runs` rows are appended only where their key is absent, as delta-rs
    appends them (`_append_absent`)."""
    if not rows:
        return True
    keyed = keyed_table(ddl)
    if keyed is not None and once is None:
        by_flow: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_flow.setdefault(row["flow"], []).append(row)
        return any([_append_absent(spark, mine, ddl, path, keyed)
                    for mine in by_flow.values()])
    return _append_once(spark, rows, ddl, path, once)


def _append_absent(spark: SparkSession, rows: list[dict[str, Any]], ddl: str, path: str,
                   keyed: tuple[str, tuple[str, ...]]) -> bool:
    """Append the `rows` (of one flow) whose key the table does not hold (read with
    delta-rs), committed as the table's keyed writers' application one version up
    (`ferry.state.writer.keyed_lock`): a writer of the same keys that commits first makes
    this commit fail, or Delta skip it (it then held that version already); either way
    the keys are read again and what is still absent appended. False when every key was
    there."""
    from ferry.state.reader import open_table, present_keys
    from ferry.state.writer import KEYED_ATTEMPTS, keyed_lock

    table_name, columns = keyed
    flow = rows[0]["flow"]
    app = keyed_lock(table_name, flow)
    for _ in range(KEYED_ATTEMPTS):
        table = open_table(path)
        present = set() if table is None else present_keys(table, path, flow, columns, rows)
        fresh = absent(rows, columns, present)
        if not fresh:
            return False
        done = None if table is None else table.transaction_version(app)
        if not _append_once(spark, fresh, ddl, path, (app, (done or 0) + 1), checked=True):
            continue  # another writer committed first: read its keys
        table = open_table(path)
        if table is not None and not absent(
                fresh, columns, present_keys(table, path, flow, columns, fresh)):
            return True
        # Delta skipped the write: another writer had committed this version meanwhile
    raise FerryError(f"flow {flow}: the {table_name} rows were overtaken by other writers "
                     f"{KEYED_ATTEMPTS} times in a row ({path}); the next run records them")


def _append_once(spark: SparkSession, rows: list[dict[str, Any]], ddl: str, path: str,
                 once: tuple[str, int] | None = None, checked: bool = False) -> bool:
    """`_append` without keys. `checked`: the caller read `once`'s version already."""
    if once is not None and not checked:
        done = transaction_version(path, once[0])
        if done is not None and done >= once[1]:  # Delta would skip the write silently
            log.info("%s already recorded up to %d", once[0], done)
            return False
    frame = _frame(spark, rows, ddl)
    # mergeSchema: tables written by an older Ferry take the new columns.
    writer = frame.write.format("delta").mode("append").option("mergeSchema", "true")
    if once is not None:
        writer = writer.option("txnAppId", once[0]).option("txnVersion", once[1])
    attempt = 0
    while True:
        attempt += 1
        try:
            writer.partitionBy("flow").save(path)
            return True
        except Exception as exc:  # py4j/Spark wrap Delta's exception; match it by name
            text = str(exc)
            if once is not None and "ConcurrentTransactionException" in text:
                log.info("another writer recorded the same rows at the same time: %s", once[0])
                return False
            if attempt < CREATE_ATTEMPTS and any(name in text for name in CREATED_MEANWHILE):
                # nothing of this attempt was committed: the append goes to the table the
                # other job created (its transaction id, if any, still makes it once)
                log.info("another job created the table %s at the same time; appending to "
                         "it", path)
                continue
            raise


def _frame(spark: SparkSession, rows: list[dict[str, Any]], ddl: str) -> Any:
    """`rows` as a DataFrame of the table's schema, handed to the JVM as Arrow: rows given
    as Python objects would start a Python worker to unpickle them (2 s in a cold job)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import DataType, StructType

    schema = DataType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    table = pa.Table.from_pylist(rows, schema=to_arrow_schema(schema, timezone="UTC"))
    return spark.createDataFrame(table, schema=schema)


def run_copy_job(spark: SparkSession | None, config_path: str, flow: Flow,
                 plan_path: str, recorder: RecordsBehind | None = None,
                 kept: RunsLanes | None = None) -> JobResult:
    """The plan's job (`ferry.runtime.job.copy_plan`) with its lanes as Spark tasks and
    its rows appended with Spark. `flow` is the driver's, loaded once; the lane tasks get
    `config_path` and load it themselves, so secrets never travel in Spark closures. With a
    `recorder` (a continuous loop), the runs and the offset map are handed to it, to be
    appended behind the copy. With `kept`, the lanes run there instead; with both, the job
    asks the server nothing, and `spark` may be None."""
    lanes: RunsLanes
    if kept is not None:
        lanes = kept
    else:
        assert spark is not None, "lanes as Spark tasks need a session"
        lanes = SparkLanes(spark, config_path, plan_path)
    append = spark_append(spark) if spark is not None else None
    return copy_plan(plan_file.read(plan_path), flow, lanes, append=append,
                     recorder=recorder)


def load_flow(config_path: str, flow_name: str, plan_path: str | None = None) -> Flow | None:
    """The job's flow, or None after printing why the config cannot give it (exit 2). With
    the job's `plan_path`, Airflow connections come from its snapshot when it has one."""
    from ferry.errors import ConfigError

    lookup = snapshot_lookup(plan_path) if plan_path is not None else None
    try:
        return load_config(config_path, flow=flow_name,
                           connection_lookup=lookup).flow(flow_name)
    except (ConfigError, KeyError) as exc:
        print(f"ferry copy job: {exc}", file=sys.stderr)
        return None


def run_and_report(spark: SparkSession | None, config_path: str, flow: Flow, plan_path: str,
                   out: TextIO | None = None, recorder: RecordsBehind | None = None,
                   kept: RunsLanes | None = None) -> Copied:
    """`run_copy_job`, its outcome printed and its exit code (`ferry.runtime.job.reported`).
    `recorder`, `kept`: see `run_copy_job`."""
    return reported(lambda: run_copy_job(spark, config_path, flow, plan_path, recorder, kept),
                    flow, out)

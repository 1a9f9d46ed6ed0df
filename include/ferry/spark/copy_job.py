"""The copy job: one Spark task per lane, then the run recorded in Delta (adapter).

`spark.range(n, numPartitions=n)` gives exactly one row, hence one task, per lane, and
`mapInArrow` runs the lane there (DataFrame API only, so Spark Connect can run it too). A
lane runs the writers of its writer slots one after another (`core/lanes.py`: a slot's
transactional id is fixed by the flow and the partition, never by the lane count). Each
task loads the config itself from its path: secrets never travel in Spark's task
closures. A writer that fails returns its ranges as `failed` rows instead of raising, so
the other writers finish their transactions and the runs table records what happened; a
writer that yields to a newer run of the flow returns them as `handed-over` rows, no
failure (`ferry.core.takeover`).

Recording, after the copy: the gaps the plan found, one `runs` row per range, and the
offset map — always rebuilt from what the target committed (the offset-map topic, from
the last recorded topic offset on), so a crash between the Kafka commit and the Delta
write loses nothing: the next job writes the missing rows.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from ferry.config import Flow, load_config
from ferry.config.connections import use_snapshot
from ferry.core import plan_file
from ferry.core.internal import offset_map_topic
from ferry.core.job import Copied, run_summary
from ferry.core.planner import Gap, Range
from ferry.core.tables import (
    GAPS_DDL,
    OFFSET_MAP_DDL,
    RUNS_DDL,
    RangeOutcome,
    RangeResult,
    StatePaths,
    absent,
    gap_row,
    keyed_table,
    offset_map_row,
    run_row,
    runs_from_entries,
)
from ferry.core.takeover import Named
from ferry.errors import FerryError
from ferry.state.reader import transaction_version, unrecorded_gaps
from ferry.state.writer import append, arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from ferry.kafka.lane import Lane
    from ferry.kafka.runs import ReadsNewest

log = logging.getLogger(__name__)


class RecordsBehind(Protocol):
    """Appends a flow's runs and offset map to Delta behind its copies
    (`ferry.spark.recorder.Recorder`)."""

    def begin(self, run_id: str) -> None:
        """A copy job of `run_id` starts: until its rows are handed over (`add`) or it
        ended without them (`end`), its offset-map entries are not a dead job's."""
        ...

    def add(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        """Take the `runs` rows of the copy job of `run_id`; its offset-map entries are on
        the target."""
        ...

    def end(self, run_id: str) -> None:
        """The copy job of `run_id` ended without rows: the runs of its committed entries
        are rebuilt from them."""
        ...


class KeptWriters(Protocol):
    """Runs a continuous loop's lanes in its own process, their clients kept from cycle to
    cycle (`ferry.spark.kept.KeptLanes`)."""

    def copy(self, flow: Flow, run_id: str, writers: dict[int, list[Range]],
             lanes: list[list[int]], role: str, owner: Named | None = None,
             topics: Collection[str] = ()) -> list[dict[str, Any]]:
        """The `runs` rows of lane `i` running the slots `lanes[i]` of `writers`, the run
        named as `owner` (default: `run_id`); `topics`, the flow's source topics, are
        learnt by new clients at once."""
        ...


@dataclass(frozen=True)
class JobResult:
    summary: dict[str, Any]
    """The run as recorded (`ferry.core.job.run_summary`): what its cycle reports."""
    failed: list[str]
    """`topic-partition, ...: error`, one per distinct reason ranges failed."""
    handed_over: list[str]
    """`topic-partition, ...: why`, one per newer run ranges were left to (no failure)."""
    offset_map_rows: int | None
    """None: left to the flow's recorder, behind the copy (`RecordsBehind`)."""
    gaps: tuple[Gap, ...]

    @property
    def run_id(self) -> str:
        return str(self.summary["run_id"])

    @property
    def records(self) -> int:
        return int(self.summary["records"])

    @property
    def ranges(self) -> int:
        return int(self.summary["ranges"])


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
    use_snapshot(plan_path)
    flow = load_config(config_path, flow=flow_name).flow(flow_name)
    for batch in batches:
        for index in batch.column(0).to_pylist():
            rows = write_slots(flow, run_id, [(slot, writers[slot]) for slot in lanes[index]],
                               role, owner=owner)
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema(RUNS_DDL))


def write_slots(flow: Flow, run_id: str, slots: list[tuple[int, list[Range]]],
                role: str, writer: Callable[..., Lane] | None = None,
                newest: ReadsNewest | None = None, owner: Named | None = None
                ) -> list[dict[str, Any]]:
    """One lane's work: copy its writer slots' ranges, one slot after another; their `runs`
    rows (a failure is in them, not raised, so the other writers finish their
    transactions). `writer`: makes a slot's writer, as `Lane` takes its arguments (default
    `Lane`).

    Another run of the flow at the same time (`ferry.core.takeover`): before each slot the
    lane reads which run is the flow's newest, and starts no slot while it is another
    run; a slot taken while this run is the newest is taken back once. Once a slot was
    taken for good, the lane starts none of its other slots either (the newer writer's run
    writes them). The ranges left are `handed-over` rows (no failure) saying why, in one
    line; a slot taken while no newer run is named leaves `failed` rows. `newest`: where
    the flow's newest run is read (default: Kafka, `ferry.kafka.runs`). `owner`: the run
    as it named itself (a continuous run's own id and place; default: `run_id`, a run of
    one cycle)."""
    from ferry.core.takeover import cycle_named
    from ferry.kafka.runs import NewestRun

    me = cycle_named(owner, run_id)
    if newest is not None:
        return _write_slots(flow, run_id, me, slots, role, writer, newest)
    with NewestRun(flow, role) as named:
        return _write_slots(flow, run_id, me, slots, role, writer, named)


def _write_slots(flow: Flow, run_id: str, me: Named, slots: list[tuple[int, list[Range]]],
                 role: str, writer: Callable[..., Lane] | None, newest: ReadsNewest
                 ) -> list[dict[str, Any]]:
    from ferry.core import takeover

    rows: list[dict[str, Any]] = []
    stopped: Stop | None = None
    for slot, ranges in slots:
        if stopped is None:
            newer = takeover.newer_run(newest.read(), me)
            stopped = (RangeOutcome.HANDED_OVER, takeover.yielded(flow.name, newer)) \
                if newer else None
        if stopped is not None:
            outcome, why = stopped
            results = [RangeResult(r.topic, r.partition, r.start, r.end, outcome=outcome,
                                   error=why) for r in ranges]
        else:
            results, stopped = _write_taken_back(flow, run_id, me, slot, ranges, role,
                                                 writer, newest)
        finished = datetime.now(UTC)
        rows.extend(run_row(flow.name, run_id, slot, r, flow.ferry.delivery, finished)
                    for r in results)
    return rows


Stop = tuple[RangeOutcome, str]
"""Why a lane starts no further slot, and the outcome of the ranges it leaves: handed over
to a newer run of the flow, or failed (its slot taken, and no newer run named)."""


def _write_taken_back(flow: Flow, run_id: str, me: Named, slot: int, ranges: list[Range],
                      role: str, writer: Callable[..., Lane] | None, newest: ReadsNewest
                      ) -> tuple[list[RangeResult], Stop | None]:
    """Copy one slot, taking it back once when it was taken while this run is the newest:
    its results, and why the lane is to start no further slot (None: go on). The ranges a
    newer run of the flow took are handed over, not failed."""
    from ferry.core import takeover

    results, taken = _write_slot(flow, run_id, slot, ranges, role, writer, newest, me)
    if taken is None:
        return results, None
    named = newest.read()
    if takeover.take_back(named, me):
        log.info("flow %s writer %s: taken by an older run of the flow just as this, the "
                 "newest, started; taking it back", flow.name, slot,
                 extra={"flow": flow.name, "lane": slot, "run_id": run_id})
        again, taken = _write_slot(flow, run_id, slot, takeover.left_over(ranges, results),
                                   role, writer, newest, me)
        results = takeover.merged(results, again)
        if taken is None:
            return results, None
        named = newest.read()
    newer = takeover.newer_run(named, me)
    if newer is None:
        return results, (RangeOutcome.FAILED,
                         f"not started: another writer of this run stopped ({taken})")
    stopped = takeover.yielded(flow.name, newer)
    for r in results:
        if r.outcome == RangeOutcome.FAILED:
            r.outcome, r.error = RangeOutcome.HANDED_OVER, stopped
    return results, (RangeOutcome.HANDED_OVER, stopped)


def name_newest(flow: Flow, run_id: str, role: str, owner: Named | None = None) -> None:
    """Name the run the flow's newest (`ferry.core.takeover`), before its lanes start, as its
    writers name themselves (`takeover.cycle_named`): a continuous run's own id and place
    with the cycle, else `run_id`; unless positions are being written outside a copy (its
    lanes then leave them their slots) or, for a continuous run, a later one is named
    already (to which it hands over)."""
    from ferry.core.takeover import cycle_named, names_itself
    from ferry.kafka.runs import NewestRun

    me = cycle_named(owner, run_id)
    with NewestRun(flow, role) as newest:
        if names_itself(newest.read(), me):
            newest.name(me)


def _write_slot(flow: Flow, run_id: str, slot: int, ranges: list[Range], role: str,
                writer: Callable[..., Lane] | None, newest: ReadsNewest, me: Named
                ) -> tuple[list[RangeResult], str | None]:
    """Copy one writer slot's ranges: their results, and why a newer writer took the slot
    (None when none did). The writer reads the flow's newest run (`newest`) before it
    initialises its id again mid-copy, and yields to a run newer than `me`."""
    from ferry import logs
    from ferry.errors import FerryError, WriterTaken
    from ferry.kafka.lane import Lane
    from ferry.progress import Progress

    context = logs.context_logger("ferry.lane", flow=flow.name, lane=slot, run_id=run_id)
    worker = (writer or Lane)(flow, ranges, run_id, progress=Progress(context, f"writer {slot}"),
                              role=role, newest=newest, owner=me)
    taken = None
    try:
        worker.run()
    except FerryError as exc:
        context.error("writer %s failed: %s", slot, exc)
        if isinstance(exc, WriterTaken):
            taken = str(exc)
    return worker.results, taken


CREATED_MEANWHILE = ("DELTA_PROTOCOL_CHANGED", "ProtocolChangedException",
                     "DELTA_METADATA_CHANGED", "MetadataChangedException")
"""Delta's answers to an append that lost a race to create or change the table: another
job (another flow's, sharing the state folder) created it, or evolved its schema, first."""
CREATE_ATTEMPTS = 3


Append = Callable[[str, str, list[dict[str, Any]], "tuple[str, int] | None"], bool]
"""How recording appends to a state table: `(path, ddl, rows, once)`, True unless `once`
(an idempotent write's application id and version) found the rows recorded already.
Spark's (`spark_append`: a copy job's, through its session) or delta-rs's
(`ferry.state.writer.append`: a continuous loop's recorder, in its own process)."""


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


@contextmanager
def _timed(timings: dict[str, float] | None, part: str) -> Iterator[None]:
    """Add the seconds the block took to `timings[part]` (when given)."""
    began = time.monotonic()
    try:
        yield
    finally:
        if timings is not None:
            timings[part] = timings.get(part, 0.0) + time.monotonic() - began


def record_offset_map(append_to: Append, flow: Flow, paths: StatePaths,
                      after: int | None = None, *, runs: Future[bool] | None = None,
                      timings: dict[str, float] | None = None,
                      pending: Callable[[], Collection[str]] = frozenset) -> int:
    """Append the offset-map entries committed on the target but not yet in Delta (after
    topic offset `after`; default: the highest Delta holds), and `runs` rows for any run
    among them that has none (its job died before writing them). Exactly once even when
    two jobs or recorders record at the same time (a retried task beside its first
    attempt, the two runs of an @continuous turn), and whether each appends with Spark or
    with delta-rs (`append_to`): both tables are appended by key (`ROW_KEYS`), an entry's
    row only where its place in the topic is not recorded, a rebuilt runs row only for
    entries no row of their run covers (`covered`), and only where its key is absent.

    `runs`: the outcome of this job's own `runs` append, made before this one; it is
    waited for before the runs rows are checked. When it failed, this job's runs are
    rebuilt from their entries like a dead job's, and its error is raised only if that did
    not record them: a failed append loses no history. `timings`: where the seconds went
    (the cursor, the entries' read, the appends), added per part. `pending()`, asked after
    the entries were read: runs of this process whose rows are still to come (a copy under
    way, or rows handed over for a later batch). Their entries are not a dead job's: the
    append stops before the first of them (Delta's cursor is the highest offset it holds),
    so they are read again by the batch that has their rows, or, were those rows never
    written (a run that left its last stretch to the next, or died), by a later batch or
    job that rebuilds them. Another process's runs are not known here: their entries may
    be rebuilt before their own rows come, which are then the same keys and not appended
    (or, for a range the rebuild saw only the start of, left to the rebuild of its later
    entries); a row is neither counted twice nor lost."""
    from ferry.kafka.admin import Admin
    from ferry.kafka.mapreader import map_topic_facts, read_entries
    from ferry.state.mapcursor import map_cursor
    from ferry.state.reader import recorded_ranges

    with _timed(timings, "cursor"):
        cursor = map_cursor(flow, *map_topic_facts(flow, Admin(flow.target_admin)))
    if after is None:
        after = cursor.after
    topic = offset_map_topic(flow)
    with _timed(timings, "entries"):
        found = list(read_entries(flow, after))
    waiting = set(pending())
    found = found[:next((i for i, (_, e) in enumerate(found) if e.run_id in waiting),
                        len(found))]
    appended = False
    if found:
        rows = [offset_map_row(entry, topic, offset, cursor.topic_id)
                for offset, entry in found]
        with _timed(timings, "offset map"):
            appended = append_to(paths.offset_map, OFFSET_MAP_DDL, rows, None)
    failed = _outcome(runs)
    if found:
        with _timed(timings, "rebuilt runs"):
            ranges = recorded_ranges(paths.runs, flow.name, {e.run_id for _, e in found})
            append_to(paths.runs, RUNS_DDL,
                      runs_from_entries([e for _, e in found], (), flow.ferry.delivery,
                                        ranges), None)
    if failed is not None:
        if found:
            log.warning("the runs append failed (%s); the runs were rebuilt from their "
                        "offset-map entries instead", failed, extra={"flow": flow.name})
        else:
            raise failed
    return len(found) if appended else 0


def _outcome(future: Future[bool] | None) -> Exception | None:
    """Wait for `future`; its exception, or None when it succeeded (or there is none)."""
    try:
        if future is not None:
            future.result()
    except Exception as exc:  # reported by the caller, after the offset map is recorded
        return exc
    return None


def run_copy_job(spark: SparkSession | None, config_path: str, flow: Flow,
                 plan_path: str, recorder: RecordsBehind | None = None,
                 kept: KeptWriters | None = None) -> JobResult:
    """Copy the plan's ranges, then record gaps, runs and the offset map. A plan with a
    `role` (a backfill chunk) copies with that role's transactional ids. `flow` is the
    driver's, loaded once; the lane tasks get `config_path` and load it themselves, so
    secrets never travel in Spark closures. With a `recorder` (a continuous loop), the
    runs and the offset map are handed to it, to be appended behind the copy. With `kept`
    (a continuous loop keeping its lanes), the lanes run there, not as Spark tasks; with
    both, the job asks the server nothing, and `spark` may be None."""
    from functools import partial

    plan = plan_file.read(plan_path)
    run_id = plan.run_id
    paths = StatePaths(flow.ferry.state_dir)
    from ferry.core.lanes import by_writer, lanes_of

    writers = by_writer(list(plan.ranges), flow.ferry.writers)
    gaps = list(plan.gaps)
    # The gaps table has one writer, delta-rs (a backfill records its gaps before any job).
    new_gaps = [gap_row(flow.name, run_id, g, flow.ferry.on_gap)
                for g in unrecorded_gaps(paths.gaps, flow.name, gaps)]
    append(paths.gaps, GAPS_DDL, new_gaps)
    runs: list[dict[str, Any]] = []
    if recorder is not None:
        recorder.begin(run_id)
    try:
        if writers and kept is not None:
            runs = kept.copy(flow, run_id, writers, lanes_of(writers, plan.lanes), plan.role,
                             plan.owner, plan.topics)
        elif writers:
            assert spark is not None, "lanes as Spark tasks need a session"
            name_newest(flow, run_id, plan.role, plan.owner)
            lanes = lanes_of(writers, plan.lanes)
            frame = spark.range(0, len(lanes), 1, len(lanes))
            task = partial(lane_task, config_path, plan_path, flow.name, run_id, writers,
                           lanes, plan.role, plan.owner)
            # As Arrow: timestamps stay UTC-aware (collect() gives local wall-clock times).
            runs = frame.mapInArrow(task, RUNS_DDL).toArrow().to_pylist()
    except BaseException:
        if recorder is not None:
            recorder.end(run_id)
        raise
    failed, handed = failures(runs), handovers(runs)
    summary = run_summary(run_id, runs, len(new_gaps))
    if recorder is not None:
        recorder.add(run_id, runs)
        return JobResult(summary, failed, handed, None, tuple(gaps))
    assert spark is not None, "recording needs a session"
    try:
        mapped = record_runs(spark_append(spark), flow, paths, runs)
    except Unwritten as exc:
        raise exc.cause from None
    return JobResult(summary, failed, handed, mapped, tuple(gaps))


class Unwritten(Exception):
    """Recording failed before the runs rows were appended (`record_runs`): `cause` says
    why, and the rows are still to be written."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def record_runs(append_to: Append, flow: Flow, paths: StatePaths,
                runs: list[dict[str, Any]], timings: dict[str, float] | None = None,
                pending: Callable[[], Collection[str]] = frozenset) -> int:
    """Append `runs` rows, then the offset map (`record_offset_map`); the offset-map rows
    appended. Raises `Unwritten` when it failed and the runs rows were not appended.

    The runs first, then the offset map: a job killed between the two leaves the map
    behind, which the next job appends from the offset-map topic (its runs recorded, so
    none is rebuilt twice). The other way round, the next job's cursor would be past the
    entries whose runs were never recorded, and those runs lost for good."""
    appended: Future[bool] = Future()
    try:
        with _timed(timings, "runs"):
            appended.set_result(append_to(paths.runs, RUNS_DDL, runs, None))
    except Exception as exc:  # rebuilt from the entries by record_offset_map
        appended.set_exception(exc)
    try:
        return record_offset_map(append_to, flow, paths, runs=appended, timings=timings,
                                 pending=pending)
    except Exception as exc:
        if appended.exception() is not None:
            raise Unwritten(exc) from exc
        raise


def failures(runs: list[dict[str, Any]]) -> list[str]:
    """One line per distinct reason ranges failed, naming their partitions. Ranges handed
    over to a newer run are no failure (`handovers`)."""
    return _by_reason(runs, RangeOutcome.FAILED)


def handovers(runs: list[dict[str, Any]]) -> list[str]:
    """One line per newer run ranges were handed over to, naming their partitions: a run
    that yielded to a newer one says so once, not once per range."""
    return _by_reason(runs, RangeOutcome.HANDED_OVER)


def _by_reason(runs: list[dict[str, Any]], outcome: RangeOutcome) -> list[str]:
    by_error: dict[str, set[str]] = {}
    for r in runs:
        if r["outcome"] == outcome:
            by_error.setdefault(r["error"], set()).add(f"{r['topic']}-{r['partition']}")
    return sorted(f"{', '.join(sorted(tps))}: {error}" for error, tps in by_error.items())


def load_flow(config_path: str, flow_name: str, plan_path: str | None = None) -> Flow | None:
    """The job's flow, or None after printing why the config cannot give it (exit 2). With
    the job's `plan_path`, Airflow connections come from its snapshot when it has one."""
    from ferry.errors import ConfigError

    if plan_path is not None:
        use_snapshot(plan_path)
    try:
        return load_config(config_path, flow=flow_name).flow(flow_name)
    except (ConfigError, KeyError) as exc:
        print(f"ferry copy job: {exc}", file=sys.stderr)
        return None


def run_and_report(spark: SparkSession | None, config_path: str, flow: Flow, plan_path: str,
                   out: TextIO | None = None, recorder: RecordsBehind | None = None,
                   kept: KeptWriters | None = None) -> Copied:
    """`run_copy_job`, its outcome printed (the summary to `out`, default stdout; failures to
    stderr, one line each, no traceback; ranges handed over to a newer run of the flow to
    `out`, as no failure). Returns the job's exit code (0, or 1 when a lane failed or the
    plan found a gap that fails the run, `ferry.on.gap=fail`) with the run as
    recorded (none when the job failed before recording it). `recorder`, `kept`: see
    `run_copy_job`."""
    try:
        result = run_copy_job(spark, config_path, flow, plan_path, recorder, kept)
    except FerryError as exc:
        print(f"ferry copy job: {exc}", file=sys.stderr)
        return Copied(1)
    return Copied(_report(result, flow, out), result.summary)


def _report(result: JobResult, flow: Flow, out: TextIO | None) -> int:
    from ferry.core.planner import describe_gaps
    mapped = ("offset map recorded behind the copy" if result.offset_map_rows is None
              else f"{result.offset_map_rows} offset-map rows recorded")
    print(f"ferry copy job: flow {flow.name} run {result.run_id}: {result.records} records in "
          f"{result.ranges} ranges, {mapped}, {len(result.gaps)} gaps", file=out or sys.stdout)
    for handed in result.handed_over:
        print(f"ferry copy job: handed over: {handed}", file=out or sys.stdout)
    for failure in result.failed:
        print(f"ferry copy job: failed: {failure}", file=sys.stderr)
    if result.failed:
        return 1
    if result.gaps and flow.ferry.on_gap == "fail":
        print(f"ferry copy job: records deleted by retention before they were mirrored: "
              f"{describe_gaps(result.gaps)} (recorded in the gaps table; set "
              f"{flow.name}.ferry.on.gap=continue to copy on from the oldest record)",
              file=sys.stderr)
        return 1
    return 0

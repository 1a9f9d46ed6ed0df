"""A copy's runs and offset map recorded in Delta, by whichever writer appends them.

`record_runs` appends a job's `runs` rows, then the offset map, rebuilt from what the
target committed (the offset-map topic, from the last recorded topic offset on), so a crash
between the Kafka commit and the Delta write loses nothing: the next job writes the missing
rows. The appends go through an `Append`: Spark's in a Spark job (`ferry.spark.copy_job`),
delta-rs's (`ferry.state.writer.append`) in the local runner and its recorder
(`ferry.runtime.recorder`). Both append the two tables by key (`core.tables.ROW_KEYS`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, cast

from ferry.core.internal import offset_map_topic
from ferry.core.tables import (
    OFFSET_MAP_DDL,
    RUNS_DDL,
    RunRow,
    StatePaths,
    offset_map_row,
    runs_from_entries,
)

if TYPE_CHECKING:
    from ferry.config import Flow

log = logging.getLogger(__name__)


Append = Callable[[str, str, list[dict[str, Any]], "tuple[str, int] | None"], bool]
"""How recording appends to a state table: `(path, ddl, rows, once)`, True unless `once`
(an idempotent write's application id and version) found the rows recorded already.
Spark's (`spark_append`: a copy job's, through its session) or delta-rs's
(`ferry.state.writer.append`: a continuous loop's recorder, in its own process)."""



class RecordsBehind(Protocol):
    """Appends a flow's runs and offset map to Delta behind its copies
    (`ferry.runtime.recorder.Recorder`)."""

    def begin(self, run_id: str) -> None:
        """A copy job of `run_id` starts: until its rows are handed over (`add`) or it
        ended without them (`end`), its offset-map entries are not a dead job's."""
        ...

    def add(self, run_id: str, rows: list[RunRow]) -> None:
        """Take the `runs` rows of the copy job of `run_id`; its offset-map entries are on
        the target."""
        ...

    def end(self, run_id: str) -> None:
        """The copy job of `run_id` ended without rows: the runs of its committed entries
        are rebuilt from them."""
        ...



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
    entries); a row is neither counted twice nor lost. Only what is readable now is read:
    a job recording the entries it has just committed waits for them first
    (`settle_entries`); a recorder behind a loop's copies reads the rest in its next batch."""
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
            append_to(paths.runs, RUNS_DDL, _rows(
                runs_from_entries([e for _, e in found], (), flow.ferry.delivery, ranges)), None)
    if failed is not None:
        if found:
            log.warning("the runs append failed (%s); the runs were rebuilt from their "
                        "offset-map entries instead", failed, extra={"flow": flow.name})
        else:
            raise failed
    return len(found) if appended else 0


def settle_entries(flow: Flow, settle_s: float) -> None:
    """Wait up to `settle_s` for the entries written to the flow's offset-map topic to
    become readable (`ferry.kafka.mapreader.wait_stable`): a job's own, just committed,
    before it records them. What is still held back after it, or a target that did not
    answer the look-ups, leaves those entries to the next job (the copy is done and
    committed): said, never raised."""
    from ferry.errors import FerryError
    from ferry.kafka.mapreader import wait_stable

    topic, extra = offset_map_topic(flow), {"flow": flow.name}
    try:
        stable, written = wait_stable(flow, settle_s)
    except FerryError as exc:
        log.warning("could not read how far %s is readable (%s): its newest entries may be "
                    "left to the next job", topic, exc, extra=extra)
        return
    if stable < written:
        log.warning("%s: last stable offset %d still behind %d after %.0f s (a transaction "
                    "open below %d, or its commit markers not yet written): the entries "
                    "from %d on are left to the next job", topic, stable, written, settle_s,
                    written, stable, extra=extra)


def _outcome(future: Future[bool] | None) -> Exception | None:
    """Wait for `future`; its exception, or None when it succeeded (or there is none)."""
    try:
        if future is not None:
            future.result()
    except Exception as exc:  # reported by the caller, after the offset map is recorded
        return exc
    return None


class Unwritten(Exception):
    """Recording failed before the runs rows were appended (`record_runs`): `cause` says
    why, and the rows are still to be written."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def record_runs(append_to: Append, flow: Flow, paths: StatePaths,
                runs: list[RunRow], timings: dict[str, float] | None = None,
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
            appended.set_result(append_to(paths.runs, RUNS_DDL, _rows(runs), None))
    except Exception as exc:  # rebuilt from the entries by record_offset_map
        appended.set_exception(exc)
    try:
        return record_offset_map(append_to, flow, paths, runs=appended, timings=timings,
                                 pending=pending)
    except Exception as exc:
        if appended.exception() is not None:
            raise Unwritten(exc) from exc
        raise


def _rows(runs: list[RunRow]) -> list[dict[str, Any]]:
    """`runs` as an `Append` takes rows of any table (a `RunRow` is such a dict)."""
    return cast("list[dict[str, Any]]", runs)

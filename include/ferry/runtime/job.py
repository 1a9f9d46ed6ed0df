"""A copy job's shape, whichever runner runs it: the plan's gaps recorded, its lanes run,
its runs and offset map recorded, and its outcome reported.

`copy_plan` is the job; what differs between the two runners is handed to it: where the
lanes run (`RunsLanes`: Spark tasks, `ferry.spark.copy_job.SparkLanes`, or threads of this
process, `ferry.runtime.kept_lanes.KeptLanes`) and how the rows reach Delta (at once
through an `Append`, or behind the copy through a loop's recorder, `RecordsBehind`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from ferry.core.job import Copied, run_summary
from ferry.core.planner import Gap, Range
from ferry.core.tables import GAPS_DDL, RangeOutcome, RunRow, StatePaths, gap_row
from ferry.core.takeover import Named
from ferry.errors import FerryError

if TYPE_CHECKING:
    from ferry.config import Flow
    from ferry.core.plan_file import PlanFile
    from ferry.runtime.recording import Append, RecordsBehind

log = logging.getLogger(__name__)


class RunsLanes(Protocol):
    """Runs a job's lanes: Spark tasks (`ferry.spark.copy_job.SparkLanes`) or threads of
    this process (`ferry.runtime.kept_lanes.KeptLanes`)."""

    def copy(self, flow: Flow, run_id: str, writers: dict[int, list[Range]],
             lanes: list[list[int]], role: str, owner: Named | None = None,
             topics: Collection[str] = ()) -> list[RunRow]:
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


def copy_plan(plan: PlanFile, flow: Flow, lanes: RunsLanes, *, append: Append | None = None,
              recorder: RecordsBehind | None = None) -> JobResult:
    """Copy the plan's ranges on `lanes`, then record gaps, runs and the offset map. A plan
    with a `role` (a backfill chunk) copies with that role's transactional ids. With a
    `recorder` (a continuous loop), the runs and the offset map are handed to it, to be
    appended behind the copy; else they are appended now through `append`. The gaps table
    has one writer, delta-rs (a backfill records its gaps before any job)."""
    from ferry.core.lanes import by_writer, lanes_of
    from ferry.kafka.mapreader import STABLE_WAIT_S
    from ferry.runtime.recording import Unwritten, record_runs, settle_entries
    from ferry.state.reader import unrecorded_gaps
    from ferry.state.writer import append as append_gaps

    run_id = plan.run_id
    paths = StatePaths(flow.ferry.state_dir)
    writers = by_writer(list(plan.ranges), flow.ferry.writers)
    gaps = list(plan.gaps)
    new_gaps = [gap_row(flow.name, run_id, g, flow.ferry.on_gap)
                for g in unrecorded_gaps(paths.gaps, flow.name, gaps)]
    append_gaps(paths.gaps, GAPS_DDL, new_gaps)
    runs: list[RunRow] = []
    if recorder is not None:
        recorder.begin(run_id)
    try:
        if writers:
            runs = lanes.copy(flow, run_id, writers, lanes_of(writers, plan.lanes), plan.role,
                              plan.owner, plan.topics)
    except BaseException:
        if recorder is not None:
            recorder.end(run_id)
        raise
    failed, handed = failures(runs), handovers(runs)
    summary = run_summary(run_id, runs, len(new_gaps))
    if recorder is not None:
        recorder.add(run_id, runs)
        return JobResult(summary, failed, handed, None, tuple(gaps))
    assert append is not None, "a job records through an append or a recorder"
    if runs:  # its own entries, just committed: readable before they are read back
        settle_entries(flow, STABLE_WAIT_S)
    try:
        mapped = record_runs(append, flow, paths, runs)
    except Unwritten as exc:
        raise exc.cause from None
    return JobResult(summary, failed, handed, mapped, tuple(gaps))


def failures(runs: list[RunRow]) -> list[str]:
    """One line per distinct reason ranges failed, naming their partitions. Ranges handed
    over to a newer run are no failure (`handovers`)."""
    return _by_reason(runs, RangeOutcome.FAILED)


def handovers(runs: list[RunRow]) -> list[str]:
    """One line per newer run ranges were handed over to, naming their partitions: a run
    that yielded to a newer one says so once, not once per range."""
    return _by_reason(runs, RangeOutcome.HANDED_OVER)


def _by_reason(runs: list[RunRow], outcome: RangeOutcome) -> list[str]:
    by_error: dict[str, set[str]] = {}
    for r in runs:
        if r["outcome"] == outcome:
            by_error.setdefault(r["error"], set()).add(f"{r['topic']}-{r['partition']}")
    return sorted(f"{', '.join(sorted(tps))}: {error}" for error, tps in by_error.items())


def report(result: JobResult, flow: Flow, out: TextIO | None) -> int:
    """Print `result` (see `reported`); the job's exit code."""
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


def reported(job: Callable[[], JobResult], flow: Flow, out: TextIO | None = None) -> Copied:
    """`job()`, its outcome printed (the summary to `out`, default stdout; failures to
    stderr, one line each, no traceback; ranges handed over to a newer run of the flow to
    `out`, as no failure). Returns the job's exit code (0, or 1 when a lane failed or the
    plan found a gap that fails the run, `ferry.on.gap=fail`) with the run as recorded
    (none when the job failed before recording it)."""
    try:
        result = job()
    except FerryError as exc:
        print(f"ferry copy job: {exc}", file=sys.stderr)
        return Copied(1)
    return Copied(report(result, flow, out), result.summary)

"""One lane's work: its writer slots one after another, and the rule between two runs of
a flow writing the same slots (`ferry.core.takeover`).

Whoever runs a lane — a Spark task (`ferry.spark.copy_job`) or a thread of the local
runner (`ferry.runtime.kept_lanes`) — runs it through `write_slots`, so the slots' writers,
their transactional ids, the position reads and the takeover rule are the same on both
runners. A writer that fails returns its ranges as `failed` rows instead of raising, so the
other writers finish their transactions; one that yields to a newer run of the flow returns
them as `handed-over` rows, no failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ferry.core.tables import RangeOutcome, RangeResult, RunRow, run_row

if TYPE_CHECKING:
    from ferry.config import Flow
    from ferry.core.planner import Range
    from ferry.core.takeover import Named
    from ferry.kafka.lane import Lane
    from ferry.kafka.runs import ReadsNewest

log = logging.getLogger(__name__)


def write_slots(flow: Flow, run_id: str, slots: list[tuple[int, list[Range]]],
                role: str, writer: Callable[..., Lane] | None = None,
                newest: ReadsNewest | None = None, owner: Named | None = None
                ) -> list[RunRow]:
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
                 ) -> list[RunRow]:
    from ferry.core import takeover

    rows: list[RunRow] = []
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

"""Two runs of one flow at once: which one goes on (pure).

Kafka keeps them exact: both hold the flow's writer ids (`core/lanes.py`), so the newest
`init_transactions` of a slot fences the other writer, and nothing is doubled. But left
alone, each run's lanes take slots from the other's lanes and both runs fail, neither
making progress. So the **newest run** of a flow goes on and the older one yields:

- a run names itself the flow's newest run in Kafka before its lanes start (the last one
  named wins; `ferry.kafka.runs`);
- a lane starts no writer slot while another run is named newest: that run writes it;
- a lane whose slot was taken while its own run is still the newest (an older run's lane
  read the name just before it changed, then took the slot) takes it back, once, and
  copies what is left of the slot's ranges; the older lane, fenced in turn, yields.

A **continuous run** (a run of the `@continuous` DAG: cycles back to back) names itself
by its own id with its place in the flow's order of runs (`since_ms`, its DAG run's
time), the same for all its cycles, and with the cycle whose lanes named it (`cycle`).
Its cycles run one at a time, so the cycle named last is its live one: a cycle the loop
abandoned as hung, whose writer wakes fenced by the next cycle's, yields to that cycle
like an older run (its ranges handed over) and never takes its slot back. Between two
continuous runs their place decides, not who named last: the later run goes on, and the
earlier one **hands over** to it and ends (`hands_over`), so the next run of the DAG can
start while the one before still copies.
An earlier run naming itself again (it read the name just before it changed) is not
yielded to, and a retry of an earlier run (its place unchanged) hands over at once. A
run of one cycle beside a continuous run keeps the last-named rule: it goes on while it
is named last, and the continuous run names itself again in its next cycle.

**Positions written outside a copy** (`ferry positions reset`, an adoption, a position
restored from the offset map) are named the flow's newest too, as a positions write
(`Named.positions`), before the writer takes each slot's id, and named again as done when
it ends. Every run's lanes yield to a positions write (they never take a slot back from
it), and a continuous run does not name itself while one is under way: its cycles copy
nothing until it is done, then it names itself again, and its next cycle plans from the
positions as written. A positions write whose writer is gone (killed before it said it
was done) counts as done `POSITIONS_LEASE_MS` after it last named itself.

This is about progress only: a lane that reads the name late, or cannot read it, is still
fenced by Kafka, so safety never rests on it. A run of another role (a backfill into a
topic of its own) has writer ids and a name of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ferry.core.planner import Range
from ferry.core.tables import RangeOutcome, RangeResult

MARKER_FORMAT = 1
POSITIONS_LEASE_MS = 300_000
"""How long a positions write counts as under way after it last named itself (before each
slot it takes), unless it said it is done: a positions writer's transactions time out
after as long (`kafka/positions.py`), so one still writing has named itself since."""


@dataclass(frozen=True)
class Named:
    """A run as it names itself the flow's newest."""

    run: str
    """The run's id: a continuous run's own, the same for all its cycles."""
    since_ms: int | None = None
    """A continuous run's place in the flow's order of runs (epoch milliseconds of its DAG
    run's time); None for a run of one cycle."""
    cycle: str | None = None
    """The cycle of a continuous run that named it (the cycle's run id); None: the run as a
    whole (a run of one cycle, or a name of an earlier Ferry)."""
    positions: bool = False
    """A positions write outside a copy (a reset, an adoption, a restore), not a run."""
    done: bool = False
    """A positions write that ended (or whose lease ran out: `POSITIONS_LEASE_MS`)."""

    @property
    def continuous(self) -> bool:
        return self.since_ms is not None


def encode_marker(named: Named, at_ms: int) -> str:
    """The commit metadata naming `named` the flow's newest run (named at `at_ms`)."""
    marker: dict[str, object] = {"ferry_format": MARKER_FORMAT, "ferry_run": named.run,
                                 "ferry_at": at_ms}
    if named.since_ms is not None:
        marker["ferry_since"] = named.since_ms
    if named.cycle is not None:
        marker["ferry_cycle"] = named.cycle
    if named.positions:
        marker["ferry_writes"] = "positions"
        marker["ferry_done"] = named.done
    return json.dumps(marker)


def decode_marker(metadata: str | None, now_ms: int | None = None) -> Named | None:
    """The run a marker names; None for no marker, or metadata that is not one this Ferry
    wrote (another format: nothing is concluded from it). A marker of an earlier Ferry
    (no `ferry_since`) names a run of one cycle. With `now_ms` (the reader's clock), a
    positions write named `POSITIONS_LEASE_MS` ago or more reads as done."""
    try:
        data = json.loads(metadata or "{}")
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("ferry_format") != MARKER_FORMAT:
        return None
    run, since, cycle = data.get("ferry_run"), data.get("ferry_since"), data.get("ferry_cycle")
    if not isinstance(run, str) or not run:
        return None
    positions, at = data.get("ferry_writes") == "positions", data.get("ferry_at")
    done = positions and (data.get("ferry_done") is True or (
        now_ms is not None and isinstance(at, int) and now_ms - at >= POSITIONS_LEASE_MS))
    return Named(run, since if isinstance(since, int) and not isinstance(since, bool)
                 else None, cycle if isinstance(cycle, str) and cycle else None,
                 positions, done)


def writing(newest: Named | None) -> bool:
    """Whether a positions write named the flow's newest is under way."""
    return newest is not None and newest.positions and not newest.done


def newer_run(newest: Named | None, me: Named) -> str | None:
    """The run that has to go on instead of `me`: the one named newest, when it is another
    run, unless both are continuous and it is not later in the flow's order than `me`; or
    another cycle of `me`'s own run, named after `me` was (its id: `me` was abandoned as
    hung); or a positions write named after `me` was, under way or done (its positions are
    as written: the next plan starts from them). None: `me` goes on."""
    if newest is None:
        return None
    if newest.positions:
        return newest.run
    if newest.run == me.run:
        if newest.cycle is not None and me.cycle is not None and newest.cycle != me.cycle:
            return newest.cycle
        return None
    if newest.since_ms is not None and me.since_ms is not None \
            and newest.since_ms <= me.since_ms:
        return None
    return newest.run


def take_back(newest: Named | None, me: Named) -> bool:
    """Whether a lane of `me` whose slot was taken takes it back: only when its run is
    positively the one to go on (an unknown newest never starts a tug of war)."""
    return newest is not None and newer_run(newest, me) is None


def hands_over(newest: Named | None, me: Named) -> str | None:
    """The continuous run `me` hands over to and ends for: a continuous run named newest
    that is later than `me` in the flow's order (None: `me` goes on). A run of one cycle
    named newest is yielded to by `me`'s lanes, but not handed over to."""
    if newest is None or not newest.continuous or not me.continuous \
            or newest.run == me.run:
        return None
    return newer_run(newest, me)


def cycle_named(owner: Named | None, run_id: str) -> Named:
    """How the cycle `run_id` names itself and its writers: a continuous run's `owner` with
    the cycle (so a cycle abandoned as hung yields to the run's later cycles instead of
    taking its slots back), else `owner`, else the run of one cycle `run_id`. Pure."""
    if owner is not None and owner.continuous:
        return Named(owner.run, owner.since_ms, run_id)
    return owner or Named(run_id)


def names_itself(newest: Named | None, me: Named) -> bool:
    """Whether `me` names itself the flow's newest before its lanes start: always, except
    while a positions write is under way (`writing`: its lanes leave it their slots), and
    a continuous run once a later one is named (it hands over instead)."""
    return not writing(newest) and (not me.continuous or hands_over(newest, me) is None)


def left_over(ranges: Sequence[Range], results: Sequence[RangeResult]) -> list[Range]:
    """The ranges a writer did not finish (failed or never reached), for the writer that
    takes its slot back: per partition, a tail of the given ranges, so they stay
    adjacent. `results` are the writer's, one per range, in any order."""
    unfinished = {(r.topic, r.partition, r.start, r.end) for r in results
                  if r.outcome in (RangeOutcome.FAILED, RangeOutcome.PENDING)}
    return [r for r in ranges if (r.topic, r.partition, r.start, r.end) in unfinished]


def merged(first: Sequence[RangeResult], again: Sequence[RangeResult]) -> list[RangeResult]:
    """A slot's results after it was taken back: the first writer's, each range the second
    writer ran replaced by the second's outcome with both writers' counts added (the
    first may have committed part of it before it was fenced)."""
    second = {(r.topic, r.partition, r.start, r.end): r for r in again}
    out: list[RangeResult] = []
    for r in first:
        later = second.get((r.topic, r.partition, r.start, r.end))
        if later is None:
            out.append(r)
            continue
        out.append(replace(later, records=r.records + later.records,
                           bytes=r.bytes + later.bytes,
                           duplicates=r.duplicates + later.duplicates,
                           max_age_ms=max(r.max_age_ms, later.max_age_ms),
                           seconds=r.seconds + later.seconds))
    return out


def yielded(flow: str, newer: str) -> str:
    """The one line a run that yielded to `newer` says for every range it left."""
    return (f"flow {flow}: run {newer} of the flow started after this one and writes the "
            "same partitions, so this run left them to it (Kafka fenced this run's "
            "writers; nothing past their last commit was kept, nothing is doubled)")

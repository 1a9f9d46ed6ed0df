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

This is about progress only: a lane that reads the name late, or cannot read it, is still
fenced by Kafka, so safety never rests on it. A run of another role (a backfill into a
topic of its own) has writer ids and a name of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from ferry.core.planner import Range
from ferry.core.tables import RangeOutcome, RangeResult

MARKER_FORMAT = 1


def encode_marker(run_id: str, at_ms: int) -> str:
    """The commit metadata naming `run_id` the flow's newest run (named at `at_ms`)."""
    return json.dumps({"ferry_format": MARKER_FORMAT, "ferry_run": run_id, "ferry_at": at_ms})


def decode_marker(metadata: str | None) -> str | None:
    """The run a marker names; None for no marker, or metadata that is not one this Ferry
    wrote (another format: nothing is concluded from it)."""
    try:
        data = json.loads(metadata or "{}")
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("ferry_format") != MARKER_FORMAT:
        return None
    run = data.get("ferry_run")
    return run if isinstance(run, str) and run else None


def newer_run(newest: str | None, run_id: str) -> str | None:
    """The run that has to go on instead of `run_id`: the newest named, when it is another
    one (None: `run_id` is the newest, or none is known)."""
    return newest if newest is not None and newest != run_id else None


def take_back(newest: str | None, run_id: str) -> bool:
    """Whether a lane of `run_id` whose slot was taken takes it back: only when its run is
    positively the newest (an unknown newest never starts a tug of war)."""
    return newest is not None and newest == run_id


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

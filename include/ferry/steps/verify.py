"""`ferry verify`: compare source and target record by record through the offset map, and
record the result in the Delta `verify` table.

Per mirrored partition: every source record still in the log within what the flow covered
must have its pair on the target with the same digest (key, value, headers, timestamp).
Also counted: source records inside the covered range that the offset map does not pair
(*skipped*: a record the mirror never wrote) and target records no pair points at
(*extra*: duplicates an at_least_once crash left behind).

Both sides are read as they are compared, so a partition of any size is checked in memory
flat in its size (where the offset map's targets rise with its sources, as they do unless
a range was written after a later one).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ferry.config import Flow
from ferry.core.verify import (
    ALTERED,
    MISSING,
    Comparison,
    TargetSpan,
    compare_in_memory,
    compare_in_order,
    iter_pairs,
    pairs,
    target_span,
)
from ferry.errors import UsageError
from ferry.state.store import DeltaStore
from ferry.steps.ports import Claims, ReadsDigests, StateStore, VerifySource

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class PartitionCheck(Comparison):
    """One partition's result: what comparing it found (mismatches and skipped records as
    runs of consecutive offsets) over source offsets [source_start, source_end)."""

    topic: str
    partition: int
    source_start: int
    source_end: int

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.skipped

    def text(self, flow: Flow) -> str:
        where = f"{self.topic}-{self.partition} [{self.source_start}, {self.source_end})"
        if self.ok:
            return f"ok {where}: {self.checked:,} records equal" + (
                f" ({self.extra} extra target records)" if self.extra else "")
        tp, remote = f"{self.topic}-{self.partition}", \
            f"{flow.remote_topic(self.topic)}-{self.partition}"
        problems = [f"{m.kind} {tp}@{_offsets(m.source_offset, m.records)} -> "
                    f"{remote}@{_offsets(m.target_offset, m.records)}"
                    for m in self.mismatches[:5]]
        problems += [f"skipped {tp}@{_offsets(s.start, s.records)} (not on the target)"
                     for s in self.skipped[:5]]
        more = len(self.mismatches) + len(self.skipped) - len(problems)
        counts = [f"{n:,} {what}" for n, what in (
            (self.count(ALTERED), "altered"), (self.count(MISSING), "missing"),
            (self.skipped_records, "skipped")) if n]
        return (f"MISMATCH {where}: " + "; ".join(problems)
                + (f"; and {more} more runs" if more > 0 else "")
                + f" ({', '.join(counts)})")

    def to_json(self) -> dict[str, Any]:
        """The partition's result as `ferry verify --json` prints it: every run of
        mismatches and of skipped records, and their records counted."""
        return {"topic": self.topic, "partition": self.partition,
                "source_start": self.source_start, "source_end": self.source_end,
                "checked": self.checked, "ok": self.ok,
                "altered": self.count(ALTERED), "missing": self.count(MISSING),
                "skipped_records": self.skipped_records,
                "mismatches": [asdict(m) for m in self.mismatches],
                "skipped": [{"start": s.start, "end": s.end} for s in self.skipped],
                "extra": self.extra}


def _offsets(first: int, records: int) -> str:
    return str(first) if records == 1 else f"{first}..{first + records - 1}"


def verify(flow: Flow, topic: str | None = None, run_id: str = "", *,
           source: VerifySource | None = None, target: ReadsDigests | None = None,
           claims: Claims | None = None, state: StateStore | None = None
           ) -> list[PartitionCheck]:
    """Check every mirrored partition of the flow (or of `topic`); record the results.
    `source`, `target`, `claims` (the offset map's claims) and `state` (its Delta tables)
    default to the flow's."""
    from ferry.core.internal import reader_group
    from ferry.core.planner import TopicPartition
    from ferry.steps.clusters import Cluster
    from ferry.steps.lookup import partition_entries

    source = source or Cluster(flow.source_admin)
    target = target or Cluster(flow.target_admin)
    # Every claim, also into a remote topic deleted since: its records are missing now.
    entries = (claims or (lambda f: partition_entries(f, claims=True)))(flow)
    keys = sorted(k for k in entries if topic is None or k[0] == topic)
    if topic is not None and not keys:
        raise UsageError(f"flow {flow.name} has mirrored nothing of a topic {topic!r}")
    lows = source.watermarks([TopicPartition(t, p) for t, p in keys])
    checks: list[PartitionCheck] = []
    group = reader_group(flow, "verify")
    for t, p in keys:
        found = entries[(t, p)]
        low = lows[TopicPartition(t, p)].low
        start, end = max(found[0].covered_start, low), found[-1].covered_end
        span = target_span(found, low) or TargetSpan(0, 0, True)
        # A scan's deadline counts the time the other side is read too: generous per record.
        timeout = 600.0 + (end - start + span.end - span.start) / 1_000
        at_source = source.digests(t, p, start, end, group, timeout)
        at_target = target.digests(flow.remote_topic(t), p, span.start, span.end, group,
                                   timeout)
        compared = (compare_in_order(iter_pairs(found, low), at_source, at_target)
                     if span.in_order else
                     compare_in_memory(pairs(found, low), dict(at_source), dict(at_target)))
        check = PartitionCheck(topic=t, partition=p, source_start=start, source_end=end,
                               checked=compared.checked, mismatches=compared.mismatches,
                               skipped=compared.skipped, extra=compared.extra)
        log.info("%s", check.text(flow), extra={"flow": flow.name, "topic": t, "partition": p})
        checks.append(check)
    _record(flow, checks, run_id, state or DeltaStore.of(flow))
    return checks


def _record(flow: Flow, checks: list[PartitionCheck], run_id: str, state: StateStore) -> None:
    from ferry.core.tables import verify_row

    now = datetime.now(UTC)
    rows = [verify_row(
        flow.name, run_id, c.topic, c.partition, c.source_start, c.source_end, c.checked,
        c.count(ALTERED), c.count(MISSING), c.skipped_records, c.extra,
        [asdict(m) for m in c.mismatches[:100]], c.ok, now) for c in checks]
    state.append("verify", rows)

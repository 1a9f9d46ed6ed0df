"""The checkpoint step: translate source consumer groups exactly, write MM2-format
checkpoints, and (with `sync.group.offsets.enabled`) move idle target groups forward.

Each source group that passes the flow's group filter and has committed offsets on
mirrored topics is translated through the offset map (`ferry.core.checkpoints.translate`).
A checkpoint is emitted by MM2's rule (new, downstream advanced, or the source group
rewound) to `<source>.checkpoints.internal` on the target; group offsets are committed
on the target only into groups nobody consumes there (EMPTY or absent) and only forward;
active groups are left alone and reported. Every translation is a row in the Delta
`checkpoints` table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ferry.config import Config, Flow
from ferry.core.checkpoints import (
    Checkpoint,
    Translated,
    latest,
    offsets_to_commit,
    should_emit,
    translate,
    translate_back,
)
from ferry.core.offsetmap import MapEntry, MapWindow
from ferry.core.sync.topics import mirrored_topics
from ferry.errors import UsageError
from ferry.state.store import DeltaStore
from ferry.steps.clusters import Cluster
from ferry.steps.ports import CheckpointsTarget, EntriesOf, GroupsSource, StateStore

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Translation:
    """One group partition: where it committed on the source, where that is on the
    target."""

    group: str
    topic: str
    partition: int
    source_offset: int
    metadata: str
    target_topic: str
    target_offset: int | None
    status: Translated
    """exact, bounded (the group is ahead of the mirror: the end of what was mirrored),
    or not-mirrored (nothing of the partition is on the target yet)."""

    def checkpoint(self) -> Checkpoint | None:
        if self.target_offset is None:
            return None
        return Checkpoint(self.group, self.target_topic, self.partition, self.source_offset,
                          self.target_offset, self.metadata)


@dataclass
class CheckpointReport:
    flow: str
    translations: list[Translation] = field(default_factory=list)
    emitted: list[Checkpoint] = field(default_factory=list)
    synced: dict[str, int] = field(default_factory=dict)
    """Target group -> partitions whose offsets were committed."""
    active: list[str] = field(default_factory=list)
    """Target groups left untouched because consumers are active there."""

    def to_json(self) -> dict[str, Any]:
        return {"flow": self.flow,
                "translations": [t.__dict__ for t in self.translations],
                "emitted": len(self.emitted), "synced_groups": dict(self.synced),
                "active_groups_left_untouched": list(self.active)}


def checkpoints_topic(flow: Flow) -> str:
    return flow.policy.checkpoints_topic(flow.named_source)


def translate_groups(flow: Flow, group: str | None = None,
                     reverse: Flow | None = None, *, source: GroupsSource | None = None,
                     entries_of: EntriesOf | None = None) -> list[Translation]:
    """Translations of every eligible source group (or only `group`), read-only.

    With `reverse` (the flow target->source, when configured), offsets the groups
    committed on remote topics that came from the target (`B.x` on A for A->B: consumers
    that failed over earlier) translate back to the original topic through the reverse
    flow's offset map, exactly: fail-back.

    `source` defaults to the flow's source cluster, `entries_of` to the offset maps as
    `ferry.steps.lookup.partition_entries` reads them (Delta, then the offset-map topic).
    """
    from ferry.steps.lookup import partition_entries

    source = source or Cluster(flow.source_admin)
    mirrored = mirrored_topics(flow, {t.name: t.partitions for t in source.topics().values()})
    if group is not None:
        if not flow.groups.accepts(group):
            raise UsageError(f"group {group!r} does not pass the flow's group filter "
                             f"(groups={flow.groups.include}, "
                             f"groups.exclude={flow.groups.exclude})")
        groups = [group]
    else:
        groups = [g for g in source.list_groups() if flow.groups.accepts(g)]
    offsets = {name: source.committed(name) for name in groups}
    # Only the offset-map entries the groups need (the map grows with every run): of the
    # partitions they committed, those ending after the lowest offset committed there
    # (`MapWindow`; a translation at an offset reads nothing that ends before it).
    topics = {t for found in offsets.values() for t, _ in found}
    lowest: dict[tuple[str, int], int] = {}
    for found in offsets.values():
        for (topic, partition), (offset, _) in found.items():
            if topic in mirrored:
                lowest[topic, partition] = min(offset, lowest.get((topic, partition), offset))
    windows = [MapWindow(t, p, offset) for (t, p), offset in sorted(lowest.items())]
    entries = (entries_of(flow, topics & set(mirrored)) if entries_of is not None
               else partition_entries(flow, topics & set(mirrored), windows=windows))
    back = _fail_back_entries(flow, reverse, {t for t in topics if t not in mirrored},
                              entries_of or partition_entries)
    result: list[Translation] = []
    for name, found in offsets.items():
        for (topic, partition), (offset, metadata) in sorted(found.items()):
            if topic in mirrored:
                answer = translate(entries.get((topic, partition), []), offset)
                downstream = flow.remote_topic(topic)
            elif (topic, partition) in back:
                filled = back[(topic, partition)]
                answer = translate_back(filled, offset)
                downstream = filled[0].source_topic
            else:
                continue
            target, status = answer if answer else (None, Translated.NOT_MIRRORED)
            result.append(Translation(name, topic, partition, offset, metadata, downstream,
                                      target, status))
    return result


def _fail_back_entries(flow: Flow, reverse: Flow | None, remotes: set[str],
                       entries_of: EntriesOf) -> dict[tuple[str, int], list[MapEntry]]:
    """(remote topic on this flow's source, partition) -> the reverse flow's entries that
    filled it, for the committed `remotes` that came from the target and pass the flow's
    topic filter (MM2 filters checkpoint topics too)."""
    if reverse is None:
        return {}
    originals = {reverse.policy.upstream_topic(t) for t in remotes
                 if flow.topics.accepts(t) and flow.policy.topic_source(t) == flow.target}
    originals.discard(None)
    if not originals:
        return {}
    found: dict[tuple[str, int], list[MapEntry]] = {}
    for filled in entries_of(reverse, {t for t in originals if t}).values():
        if filled and filled[0].target_topic in remotes:
            found[(filled[0].target_topic, filled[0].target_partition)] = filled
    return found


def reverse_of(config: Config, flow: Flow) -> Flow | None:
    """The enabled flow target->source, whose offset map serves fail-back."""
    return next((f for f in config.enabled_flows
                 if (f.source, f.target) == (flow.target, flow.source)), None)


def run(flow: Flow, run_id: str = "", reverse: Flow | None = None, *,
        source: GroupsSource | None = None, target: CheckpointsTarget | None = None,
        entries_of: EntriesOf | None = None, state: StateStore | None = None
        ) -> CheckpointReport:
    """Translate (fail-back too, with `reverse`), emit checkpoints, sync idle target groups
    (when enabled), record (`state`: by default Delta, under the flow's `ferry.state.dir`).
    The clients default to the flow's clusters and offset maps (see `translate_groups`)."""
    report = CheckpointReport(flow.name, translate_groups(
        flow, reverse=reverse, source=source, entries_of=entries_of))
    target = target or Cluster(flow.target_admin)
    topic = checkpoints_topic(flow)
    created = target.ensure_mm2_topic(topic, flow.checkpoints_replication_factor,
                                      "checkpoints.topic.replication.factor")
    # A topic created now holds no checkpoints; a consumer asked at once may not know it.
    before = {} if created else latest(target.read_checkpoints(flow, topic))
    current = [c for t in report.translations if (c := t.checkpoint()) is not None]
    report.emitted = [c for c in current if should_emit(c, before.get(c.key))]
    target.write_checkpoints(flow, topic, report.emitted)
    if flow.sync_group_offsets.active:
        by_group: dict[str, list[Checkpoint]] = {}
        for checkpoint in current:
            by_group.setdefault(checkpoint.group, []).append(checkpoint)
        for group, described in target.describe_groups(sorted(by_group)).items():
            writes = offsets_to_commit(by_group[group], described)
            if writes is None:
                report.active.append(group)
                log.warning("group %s is active on %s (%s): its offsets are left untouched",
                            group, flow.target, described.state, extra={"flow": flow.name})
            elif writes:
                target.commit(group, list(writes.values()))
                report.synced[group] = len(writes)
    bounded = [t for t in report.translations if t.status == Translated.BOUNDED]
    if bounded:
        log.info("%d group partitions are ahead of the mirror: checkpointed at the end of "
                 "what was mirrored", len(bounded), extra={"flow": flow.name})
    _record(flow, report, run_id, state or DeltaStore.of(flow))
    log.info("checkpoints: %d group partitions translated, %d emitted, %d groups synced, %d "
             "active groups untouched", len(report.translations), len(report.emitted),
             len(report.synced), len(report.active), extra={"flow": flow.name})
    return report


def due(flow: Flow, state: StateStore | None = None) -> str:
    """`due`, or why the checkpoint step does not run now (`emit.checkpoints.*`; an
    interval you set is honoured across runs, the default runs every run)."""
    from ferry.core.sync.schedule import due_steps

    last = (state or DeltaStore.of(flow)).last_steps(flow.name) \
        if flow.emit_checkpoints.explicit else {}
    return due_steps(flow, last, datetime.now(UTC), steps=("checkpoints",))["checkpoints"]


def _record(flow: Flow, report: CheckpointReport, run_id: str, state: StateStore) -> None:
    from ferry.core.tables import checkpoint_row, sync_row

    now = datetime.now(UTC)
    emitted = {c.key for c in report.emitted}
    rows = [checkpoint_row(flow.name, run_id, t.group, t.topic, t.partition, t.source_offset,
                           t.target_topic, t.target_offset, t.status,
                           (t.group, t.target_topic, t.partition) in emitted,
                           t.group in report.synced, now) for t in report.translations]
    state.append("checkpoints", rows)
    if flow.emit_checkpoints.explicit:  # remembered to honour the interval
        state.append("syncs", [sync_row(
            flow.name, run_id, "checkpoints",
            [f"{c.group} {c.topic}-{c.partition}" for c in report.emitted], now)])

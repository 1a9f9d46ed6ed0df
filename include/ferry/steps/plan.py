"""The plan step of a cycle, shared by the CLI (`ferry plan`, `ferry mirror`) and the DAG.

A cycle is sync topology -> plan (watermarks, positions) -> copy (lanes) -> record
(`ferry.steps.cycle`). `prepare` does the first two against the clusters (cheap: a few
admin calls, no JVM), so an idle cycle ends there. The plan is fixed when it is made; the
copy step receives it whole.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ferry.config import Flow
from ferry.core.internal import positions_group
from ferry.core.plan_file import PlanFile
from ferry.core.planner import Limits, Plan, TopicPartition, Watermarks, plan
from ferry.core.sync.topics import TopicActions
from ferry.core.takeover import Named
from ferry.errors import TerminalError

if TYPE_CHECKING:
    from ferry.steps.ports import PlanSource, PlanTarget, StateStore
    from ferry.steps.sync import SyncReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A cycle's plan and what was found on the way."""

    flow: str
    run_id: str
    planned_at: str
    lanes: int
    plan: Plan
    topics: dict[str, int]
    watermarks: dict[TopicPartition, Watermarks]
    """The partitions planned, with their log start: those not at their end."""
    positions: dict[TopicPartition, int | None]
    topology: TopicActions
    ends: dict[TopicPartition, int]
    """Every partition's last stable offset; one whose position is there has nothing to
    plan, and its log start is not read."""
    owner: Named | None = None
    """The continuous run the cycle is one of (`PlanFile.owner`)."""

    def plan_file(self) -> PlanFile:
        """What the copy job gets."""
        return PlanFile(self.flow, self.run_id, self.lanes, self.plan.ranges, self.plan.gaps,
                        planned_at=self.planned_at, owner=self.owner,
                        topics=tuple(sorted(self.topics)))

    def details(self) -> dict[str, Any]:
        """What people see beside the plan file (`ferry plan --json`): each partition's
        end, position and log start ("low": null where the position is at the end, so it was not
        read), and the topology changes."""
        return {
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition,
                 "low": marks.low if marks else None,
                 "end": marks.high if marks else end, "position": self.positions.get(tp)}
                for tp, end in sorted(self.ends.items())
                for marks in [self.watermarks.get(tp)]],
            "topology": {
                "create": [{"topic": c.name, "partitions": c.partitions,
                            "replication_factor": c.replication_factor,
                            "configs": dict(c.configs)} for c in self.topology.create],
                "grow": [{"topic": g.name, "from": g.from_partitions, "to": g.to_partitions}
                         for g in self.topology.grow],
            },
        }

    def to_json(self) -> dict[str, Any]:
        """The plan file's content and the details (no secrets): `ferry plan --json`."""
        return self.plan_file().to_json() | self.details()


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]


def limits_for(flow: Flow) -> Limits:
    reset = str(flow.consumer.settings.get("auto.offset.reset", "earliest"))
    return Limits(max_records=flow.ferry.range_max_records,
                  reset="latest" if reset == "latest" else "earliest",
                  on_gap=flow.ferry.on_gap)


def prepare(flow: Flow, apply: bool = True, run_id: str | None = None,
            master: str | None = None, sync: bool = True, restore: bool = True, *,
            source: PlanSource | None = None, target: PlanTarget | None = None,
            synced: SyncReport | None = None, state: StateStore | None = None,
            idle_identity: bool = True) -> Prepared:
    """Sync the target's shape (the steps that are due; unless `apply` is False: then
    only report) and plan the partitions that have a remote partition (in a dry run: as
    they would after the sync). Without `sync` (the DAG synced in its own task) only plan.
    `master` (default `ferry.spark.master`) sizes the default lane count.

    Positions Kafka expired are taken from the offset map (`ferry.steps.recovery`) and, with
    `restore`, committed back into the positions group for the lanes. `source` and
    `target` default to the flow's clusters. `synced`: the report of the sync this cycle
    just ran against the same clusters; the plan takes its topics instead of listing both
    clusters' topics again (then `sync` and `apply` are not used for the sync). `state`:
    where incidents are recorded (default: the flow's Delta tables). `idle_identity`: check
    the topic identity of idle partitions too (a loop does when it syncs its topics;
    partitions with something to copy are always checked)."""
    from ferry.core.lanes import cores_of, lane_count
    from ferry.steps.clusters import Cluster
    from ferry.steps.sync import sync_flow

    run_id = run_id or new_run_id()
    if state is None:
        from ferry.state.store import DeltaStore

        state = DeltaStore.of(flow)
    source = source or Cluster(flow.source_admin)
    target = target or Cluster(flow.target_admin)
    report = synced or sync_flow(flow, apply=apply, run_id=run_id, source=source,
                                 target=target, steps=None if sync else ())
    topics = report.ready(flow)
    actions = report.topics
    if apply and report.steps.get("topics") != "done":
        # every cycle (the sync's topics step, when it ran here, did it): the map topic
        # is there, and keeps what it is given
        target.ensure_offset_map_topic(flow)
    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    # What an idle cycle reads is each partition's end and position. A log start matters
    # only where the position is not at the end (there is something to copy, a gap, a new
    # partition, or an end behind the position), so it is read for those partitions only.
    ends = source.last_stable(tps)
    found = _committed(flow, target, tps)
    positions = {tp: c[0] if c else None for tp, c in found.items()}
    # Topic identity (G10): positions are checked against both sides' topic IDs where
    # there is something to copy, in a remote topic this sync creates, and with
    # `idle_identity` everywhere: a remote topic deleted and created again while its
    # positions were still committed holds none of the records they count, and a source
    # topic created again with as many records as were mirrored looks idle; either way an
    # idle partition would never copy them. (One describe of each side's topics: at 10,000
    # partitions about 0.2 s each, so a loop does it when it syncs its topics.)
    created = {c.name for c in actions.create}
    among = set(tps) if idle_identity else {
        tp for tp in tps
        if positions[tp] != ends[tp] or flow.remote_topic(tp.topic) in created}
    remote_ids = target.topic_ids({flow.remote_topic(tp.topic) for tp in among} - created)
    found |= _void_stale(flow, state, {tp: found[tp] for tp in among}, remote_ids, created,
                         run_id)
    positions = {tp: c[0] if c else None for tp, c in found.items()}
    among |= {tp for tp in tps if positions[tp] != ends[tp]}
    ids = source.topic_ids({tp.topic for tp in among})
    _check_identity(flow, state, ids,
                    _source_ids({tp: found[tp] for tp in among}, ids), run_id)
    positions.update(_recover(flow, source, target, state,
                              [tp for tp in tps if positions[tp] is None], restore, run_id))
    if flow.ferry.remote_records_unmapped == "refuse":
        held = unmapped(flow, target, [tp for tp in tps if positions[tp] is None
                                       and not _new_remote(flow, tp, actions)])
        if held:
            # Another writer of this flow (a killed client's lanes still running on a Spark
            # server) may have committed its first batch since the positions were read. Its
            # records, map entries and positions commit in one transaction, and the stable
            # read below, made after the records were seen, sees its positions: then the
            # records are the flow's own and the plan continues after them.
            late = _committed(flow, target, sorted(held), stable=True)
            _check_identity(flow, state, ids, _source_ids(late), run_id)
            positions.update({tp: c[0] for tp, c in late.items() if c is not None})
            refuse_unmapped(flow, {tp: m for tp, m in held.items() if late[tp] is None})
    planned = [tp for tp in tps if positions[tp] != ends[tp]]
    starts = source.log_starts(planned)
    # a log start read after the end may have passed it (records deleted meanwhile): the
    # end is then at least the log start
    marks = {tp: Watermarks(starts[tp], max(ends[tp], starts[tp])) for tp in planned}
    result = plan(positions, marks, limits_for(flow))
    unread = {flow.remote_topic(r.topic) for r in result.ranges} - remote_ids.keys()
    remote_ids = remote_ids | (target.topic_ids(unread) if unread else {})
    result = Plan(tuple(replace(r, source_id=ids.get(r.topic, ""),
                                target_id=remote_ids.get(flow.remote_topic(r.topic), ""))
                        for r in result.ranges), result.gaps)
    lanes = lane_count(flow.tasks_max, cores_of(master or flow.ferry.spark_master), len(tps),
                       flow.ferry.writers)
    prepared = Prepared(flow.name, run_id,
                        datetime.now(UTC).isoformat(timespec="seconds"), lanes, result,
                        topics, marks, positions, actions, ends)
    log.info("planned %d ranges (%d offsets) and %d gaps over %d partitions",
             len(result.copies), result.span, len(result.gaps), len(tps),
             extra={"flow": flow.name})
    return prepared


class UnmappedRecordsError(TerminalError):
    """A remote partition the flow never copied into already holds committed records."""


def _new_remote(flow: Flow, tp: TopicPartition, actions: TopicActions) -> bool:
    """Whether this cycle's sync creates (or, in a dry run, would create) the remote
    partition of `tp`: a new topic, or a partition a grown topic adds. It holds nothing."""
    remote = flow.remote_topic(tp.topic)
    return any(c.name == remote for c in actions.create) or any(
        g.name == remote and tp.partition >= g.from_partitions for g in actions.grow)


def unmapped(flow: Flow, target: PlanTarget, never: list[TopicPartition]
             ) -> dict[TopicPartition, Watermarks]:
    """Of the partitions the flow has no position or offset map for, those whose remote
    partition holds committed records, with its watermarks. Partitions with only aborted
    records (a first transaction of Ferry's that never committed) are not among them."""
    from ferry.core.internal import reader_group

    remote = {tp: TopicPartition(flow.remote_topic(tp.topic), tp.partition) for tp in never}
    if not remote:
        return {}
    marks = target.watermarks(remote.values())
    group = reader_group(flow, "map-reader")
    return {tp: marks[r] for tp, r in sorted(remote.items())
            if marks[r].high > marks[r].low
            and target.timestamp_at(r.topic, r.partition, marks[r].low, group) is not None}


def refuse_unmapped(flow: Flow, held: Mapping[TopicPartition, Watermarks]) -> None:
    """Refuse to append to remote partitions that hold committed records the flow has no
    position or offset map for (G1): another mirror (MM2, MM1) filled them, and copying the
    source's history after them would double it."""
    if not held:
        return
    remote = [(TopicPartition(flow.remote_topic(tp.topic), tp.partition), m)
              for tp, m in sorted(held.items())]
    names = ", ".join(f"{r.topic}-{r.partition} (offsets {m.low}..{m.high - 1})"
                      for r, m in remote[:5]) + (f" and {len(held) - 5} more"
                                                  if len(held) > 5 else "")
    raise UnmappedRecordsError(
        f"flow {flow.name}: remote partition {names} on {flow.target} already holds records "
        "this flow has no offset map for (another mirror, MM2 or MM1, copied them?); copying "
        "would append the source's history after them and double it. Nothing was copied. "
        f"Adopt the old mirror's progress: `ferry adopt CONFIG --flow '{flow.name}' --from "
        f"mm2|mm1 --execute`; or, to copy everything again after them on purpose, set "
        f"{flow.name}.ferry.remote.records.unmapped = append")


class SourceRecreatedError(TerminalError):
    """Positions were committed for another incarnation of a source topic (G10)."""


def check_identity(flow: Flow, ids: Mapping[str, str],
                   recorded: Mapping[TopicPartition, str]) -> None:
    """Refuse to plan partitions whose position was committed for a source topic ID other
    than the topic's current one: the topic was deleted and created again, and its new
    offsets are not the ones the position counts (copying on would skip the new topic's
    first records, or copy them as if they continued the old ones). Pure."""
    changed = sorted(tp for tp, rid in recorded.items()
                     if rid and tp.topic in ids and ids[tp.topic] != rid)
    if not changed:
        return
    topics = sorted({tp.topic for tp in changed})
    first = changed[0]
    log.error("incident: source topic %s was deleted and recreated (topic ID %s, positions "
              "committed for %s)", ", ".join(topics), ids[first.topic], recorded[first],
              extra={"flow": flow.name, "topic": first.topic})
    raise SourceRecreatedError(
        f"flow {flow.name}: source topic {', '.join(topics)} was deleted and created again on "
        f"{flow.source} (topic ID {recorded[first]} became {ids[first.topic]}); the positions "
        f"of {', '.join(str(tp) for tp in changed[:5])} count offsets of the old topic. "
        "Nothing was copied. To mirror the new topic from its start, either delete the remote "
        f"topic {flow.remote_topic(first.topic)} on {flow.target}, or keep it and run `ferry "
        f"positions reset CONFIG --flow '{flow.name}' --topic {first.topic} --to earliest "
        "--execute`; then run again.")


def _committed(flow: Flow, target: PlanTarget, tps: list[TopicPartition],
               stable: bool = False) -> dict[TopicPartition, tuple[int, str] | None]:
    """The committed position of each of `tps` in the flow's positions group, with its
    commit metadata (`_source_ids` reads it), None where there is none.

    Not `stable` (the plan's first read): the positions last committed, whatever a writer's
    transaction holds pending. A run killed between sending its positions to its
    transaction and committing it leaves them pending until the transaction times out (a
    minute at least), and a stable read waited that long; a plan from the last committed
    positions is safe, because each lane takes its partitions' writer id (aborting such a
    transaction, or letting a live writer's commit finish) and then resumes from the
    position it reads, stable, skipping what a newer commit covers."""
    committed = target.committed(
        positions_group(flow), [(flow.remote_topic(tp.topic), tp.partition) for tp in tps],
        stable=stable)
    return {tp: committed.get((flow.remote_topic(tp.topic), tp.partition)) for tp in tps}


def stale_positions(flow: Flow, found: Mapping[TopicPartition, tuple[int, str] | None],
                    remote_ids: Mapping[str, str], created: Collection[str]
                    ) -> dict[TopicPartition, str]:
    """The committed positions that count records of an earlier incarnation of their remote
    topic -> why: the remote topic was deleted (taking those records with it) and created
    again, by this cycle's sync (`created`: any position of it is older than the topic) or
    with another topic ID than the position recorded (`remote_ids`: the current IDs; a
    position of an older Ferry records none and is trusted). Kafka drops a deleted topic's
    committed offsets asynchronously, so a sync that creates the topic again can find them
    still there. Pure."""
    from ferry.core.positions import decode_position

    stale: dict[TopicPartition, str] = {}
    for tp, c in found.items():
        if c is None:
            continue
        remote = flow.remote_topic(tp.topic)
        if remote not in created and remote_ids.get(remote, "\0") in c[1]:
            continue  # its current ID recorded: not decoded (10,000 of them a cycle)
        recorded = decode_position(c[1])
        if remote in created:
            stale[tp] = f"position {c[0]} is older than remote topic {remote}, created again"
        elif remote in remote_ids and recorded.stale_for(remote_ids[remote]):
            stale[tp] = (f"position {c[0]} was committed for remote topic ID "
                         f"{recorded.target_id}, now {remote_ids[remote]}")
    return stale


def _void_stale(flow: Flow, state: StateStore,
                found: dict[TopicPartition, tuple[int, str] | None],
                remote_ids: Mapping[str, str], created: Collection[str], run_id: str
                ) -> dict[TopicPartition, tuple[int, str] | None]:
    """`found` without the positions of a recreated remote topic (`stale_positions`), each
    recorded as an incident and logged: the partition is mirrored into the new topic from
    where a partition new to the flow starts, never from the old position (which would
    leave the new topic without the records before it)."""
    from ferry.core import incidents

    stale = stale_positions(flow, found, remote_ids, created)
    if not stale:
        return found
    for tp, why in sorted(stale.items()):
        log.warning("incident: remote topic %s was deleted and created again: %s; %s is "
                    "mirrored into it again, not resumed", flow.remote_topic(tp.topic), why, tp,
                    extra={"flow": flow.name, "topic": tp.topic, "partition": tp.partition})
    incidents.record(state, flow.name, [
        incidents.Incident(incidents.REMOTE_RECREATED, tp.topic, tp.partition, why)
        for tp, why in sorted(stale.items())], run_id)
    return {tp: None if tp in stale else c for tp, c in found.items()}


def _source_ids(found: Mapping[TopicPartition, tuple[int, str] | None],
               current: Mapping[str, str] | None = None) -> dict[TopicPartition, str]:
    """The source topic ID each committed position was committed for ("" for an older
    position without one). Metadata that holds its topic's `current` ID is not decoded (an
    idle cycle of 10,000 partitions spent a fifth of a second decoding them all): it is
    taken as that ID."""
    from ferry.core.positions import decode_position

    return {tp: current[tp.topic] if current and current.get(tp.topic, "\0") in c[1]
            else decode_position(c[1]).source_id for tp, c in found.items() if c}


def _check_identity(flow: Flow, state: StateStore, ids: Mapping[str, str],
                    recorded: Mapping[TopicPartition, str], run_id: str) -> None:
    """Refuse positions committed for another incarnation of their source topic (G10),
    recording each as an incident first."""
    from ferry.core import incidents

    try:
        check_identity(flow, ids, recorded)
    except SourceRecreatedError:
        incidents.record(state, flow.name, [
            incidents.Incident(incidents.SOURCE_RECREATED, tp.topic, tp.partition,
                               f"topic ID {recorded[tp]} became {ids[tp.topic]}")
            for tp in sorted(recorded)
            if recorded[tp] and tp.topic in ids and ids[tp.topic] != recorded[tp]], run_id)
        raise


def _recover(flow: Flow, source: PlanSource, target: PlanTarget, state: StateStore,
             missing: list[TopicPartition], restore: bool, run_id: str
             ) -> dict[TopicPartition, int | None]:
    """Positions of `missing` partitions that the offset map knows (G9)."""
    from ferry.core import incidents
    from ferry.steps import recovery

    if not missing:
        return {}
    found, older = recovery.recorded_positions(flow, missing, source=source, target=target)
    if older:  # mirrored once, but only from a topic deleted since: never start it over
        ids = source.topic_ids({tp.topic for tp in older})
        incidents.record(state, flow.name, [
            incidents.Incident(incidents.SOURCE_RECREATED, tp.topic, tp.partition,
                               f"topic ID {old} became {ids.get(tp.topic, '?')}")
            for tp, old in sorted(older.items())], run_id)
        check_identity(flow, ids, older)
    if restore and found:
        recovery.restore(flow, found, target=target)
        incidents.record(state, flow.name, [
            incidents.Incident(incidents.POSITION_RESTORED, tp.topic, tp.partition,
                               f"restored {r.position} (run {r.run_id})")
            for tp, r in sorted(found.items())], run_id)
    return {tp: r.position for tp, r in found.items()}

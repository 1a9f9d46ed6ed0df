"""What the steps need of the clusters, as small protocols (ports); protocols only.
`ferry.steps.clusters.Cluster` is the adapter-backed implementation a step builds from its
flow when it is given none.

A step takes its clients as keyword-only parameters whose default (None) is the cluster of
its flow, as before: the CLI and the DAGs pass nothing, the integration tests run the steps
against brokers, and unit tests hand them in-memory fakes that satisfy these protocols.
Ferry's `Admin` already satisfies the ones made of its own methods (`topics`, `watermarks`,
`committed`, `group_offsets`); `ferry.kafka.cluster.KafkaCluster` adds the calls that live
in `ferry.kafka`'s functions (consumer groups, MM2's topics, records, topic IDs, the
offset-map topic), each delegated unchanged, so the contracts (retries, errors naming the
cluster) are theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ferry.config import Flow
from ferry.core.checkpoints import Checkpoint, TargetGroup
from ferry.core.job import Copied
from ferry.core.offsetmap import MapCursor, MapEntry, MapWindow
from ferry.core.plan_file import PlanFile
from ferry.core.planner import Gap, TopicPartition, Watermarks
from ferry.core.positions import PositionMoved, PositionWrite
from ferry.core.sync.acls import Acl
from ferry.core.sync.configs import AlterTopicConfig, ReplaceTopicConfig, TopicConfig
from ferry.core.sync.topics import TopicActions
from ferry.core.tables import MapRow
from ferry.core.takeover import Named

if TYPE_CHECKING:
    from ferry.kafka.admin import TopicInfo
    from ferry.kafka.mm2topics import Record
    from ferry.kafka.stuck import LeftBehind

Offsets = dict[tuple[str, int], int]
"""(topic, partition) -> a group's committed offset."""
Entries = Mapping[tuple[str, int], list[MapEntry]]
"""(source topic, partition) -> its offset-map entries, overlaps resolved, in source order."""
EntriesOf = Callable[[Flow, Collection[str]], Entries]
"""The offset map of a flow, for some source topics (`ferry.steps.lookup.partition_entries`)."""


class ListsTopics(Protocol):
    def topics(self) -> Mapping[str, TopicInfo]:
        """Every topic with its partition count."""
        ...


class ReadsWatermarks(Protocol):
    def watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        """Log start and last stable offset (read_committed end) of each partition."""
        ...


class ReadsEnds(Protocol):
    """A partition's two ends read apart: an idle cycle needs only the last stable one."""

    def last_stable(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Last stable offset (read_committed end) of each partition."""
        ...

    def log_starts(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log start offset of each partition."""
        ...


class ReadsGroupOffsets(Protocol):
    def group_offsets(self, group: str, tps: Iterable[tuple[str, int]]) -> Offsets:
        """`group`'s committed offsets on (topic, partition)s; absent ones left out."""
        ...


class ReadsDigests(Protocol):
    def digests(self, topic: str, partition: int, start: int, end: int, group: str,
                timeout: float) -> Iterator[tuple[int, bytes]]:
        """(offset, digest) of every committed record in [start, end) still in the log, in
        offset order, as it is read; all of it within `timeout` seconds."""
        ...


class VerifySource(ReadsWatermarks, ReadsDigests, Protocol):
    """The source as `ferry verify` reads it."""


Claims = Callable[[Flow], Entries]
"""Every claim of a flow's offset map, also into remote topics deleted since (verify)."""


class Partitions(ListsTopics, ReadsWatermarks, Protocol):
    """A source cluster as the positions and lag steps read it."""


class ReadsRecordTimes(Protocol):
    def timestamp_at(self, topic: str, partition: int, offset: int, group: str) -> int | None:
        """The time (ms) of the first committed record at or after `offset`, or None."""
        ...


class ReadsTopicConfigs(Protocol):
    def topic_configs(self, topics: Iterable[str]) -> dict[str, TopicConfig]:
        """Every config entry of each topic, with where its value comes from."""
        ...


class LagSource(Partitions, ReadsRecordTimes, ReadsTopicConfigs, Protocol):
    """A source cluster as the lag step reads it."""


class PositionsTarget(ReadsGroupOffsets, ReadsWatermarks, Protocol):
    """The target as `ferry positions reset` and a position's restore change it."""

    def alter_offsets(self, group: str, offsets: Sequence[tuple[str, int, int, str]],
                      action: str, needs: Mapping[str, str]) -> None:
        """Set `group`'s offsets: (topic, partition, offset, commit metadata) each."""
        ...

    def write_positions(self, flow: Flow, writes: Sequence[PositionWrite]
                        ) -> list[PositionMoved]:
        """Each write's position and offset-map entries in one transaction under its
        partition's writer id, taken before the position is read again; writes whose
        position moved from their `expect` are returned, unwritten."""
        ...


class ReadsCommitted(Protocol):
    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None = None,
                  stable: bool = True) -> dict[tuple[str, int], tuple[int, str]]:
        """(offset, metadata) of `group` on `tps` (default: every partition). `stable`:
        after the transactions that commit offsets of the group are done (else the last
        offsets committed, whatever is pending)."""
        ...


class GroupsSource(ListsTopics, ReadsCommitted, Protocol):
    """The source as the checkpoint step reads its consumer groups."""

    def list_groups(self) -> list[str]:
        ...


class CheckpointsTarget(Protocol):
    """The target as the checkpoint step writes it."""

    def ensure_mm2_topic(self, topic: str, replication_factor: int, setting: str) -> bool:
        """Create one of MM2's compacted one-partition topics when it is missing; True
        when this call created it (it holds nothing yet)."""
        ...

    def read_checkpoints(self, flow: Flow, topic: str) -> list[Checkpoint]:
        ...

    def write_checkpoints(self, flow: Flow, topic: str, checkpoints: list[Checkpoint]
                          ) -> None:
        ...

    def describe_groups(self, groups: list[str]) -> dict[str, TargetGroup]:
        """Each group's state (ABSENT when unknown) and, when nobody consumes, its offsets."""
        ...

    def commit(self, group: str, checkpoints: list[Checkpoint]) -> None:
        """Commit the checkpoints' downstream offsets (and metadata) into `group`."""
        ...


class HeartbeatsTarget(Protocol):
    def ensure_mm2_topic(self, topic: str, replication_factor: int, setting: str) -> bool:
        ...

    def append(self, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
        """Write (key, value, timestamp ms) records to partition 0 and wait for them."""
        ...


class HeartbeatsReader(ListsTopics, Protocol):
    def read_all(self, topic: str, group: str) -> list[Record]:
        """Every committed record of partition 0, start to end."""
        ...


class HasTopicIds(Protocol):
    def topic_ids(self, names: Iterable[str]) -> dict[str, str]:
        """name -> Kafka's topic ID of each existing topic among `names`."""
        ...


class OffsetMapTarget(HasTopicIds, Protocol):
    """The target as the offset-map look-ups read it: the offset-map topic (where the
    Delta table stands in it, and the committed entries after that) and topic IDs."""

    def map_cursor(self, flow: Flow) -> MapCursor:
        ...

    def map_entries(self, flow: Flow, after: int) -> Iterable[tuple[int, MapEntry]]:
        """(topic offset, entry) of `flow`'s committed entries after topic offset `after`."""
        ...


class SyncSource(ListsTopics, ReadsTopicConfigs, Protocol):
    """A cluster as the sync step reads it."""

    def acls(self) -> list[Acl]:
        """Every topic and group ACL. Raises `ferry.kafka.acls.NoAuthorizer` when the
        cluster has no authorizer (its ACL API is disabled)."""
        ...


class SyncTarget(SyncSource, Protocol):
    """The target as the sync step (and a backfill's destinations) change it."""

    def apply_topology(self, flow: Flow, actions: TopicActions) -> None:
        """Create missing remote topics and add partitions (an existing one is no error)."""
        ...

    def ensure_offset_map_topic(self, flow: Flow, existing: Collection[str] | None = None
                                ) -> None:
        """Create the flow's offset-map topic when missing (`existing`: just listed)."""
        ...

    def create_plain_topics(self, flow: Flow, partitions: dict[str, int]) -> list[str]:
        """Create topics with the target's default configs; returns those created."""
        ...

    def alter_configs(self, changes: Iterable[AlterTopicConfig]) -> None:
        """IncrementalAlterConfigs. Raises `ferry.kafka.configs.IncrementalUnsupported`
        when the cluster does not implement it."""
        ...

    def replace_configs(self, replacements: Iterable[ReplaceTopicConfig]) -> None:
        """AlterConfigs: each topic's non-default configs replaced whole."""
        ...

    def create_acls(self, acls: Iterable[Acl]) -> None:
        """Raises `ferry.kafka.acls.NoAuthorizer` when the cluster has no authorizer."""
        ...


class PlanSource(SyncSource, ReadsWatermarks, ReadsEnds, HasTopicIds, Protocol):
    """The source as a cycle's plan (`ferry.steps.plan.prepare`) reads it."""


class PlanTarget(SyncTarget, PositionsTarget, OffsetMapTarget, ReadsCommitted,
                 ReadsWatermarks, ReadsRecordTimes, Protocol):
    """The target as a cycle's plan reads and (syncing, restoring positions) changes it."""


class BackfillSource(PlanSource, Protocol):
    def offsets_at(self, tps: Iterable[TopicPartition], time_ms: int
                   ) -> dict[TopicPartition, int]:
        """The first offset of each partition whose record time is at or after `time_ms`
        (the end offset when there is none)."""
        ...


class BackfillTarget(SyncTarget, ReadsWatermarks, ReadsGroupOffsets, OffsetMapTarget,
                     Protocol):
    """The target as a backfill's plan reads it and its destinations are made."""


class CopyRunner(Protocol):
    """Runs the copy job of one plan and waits for it: `ferry.spark.submit.SparkRunner`
    (spark-submit, or a Spark Connect server from this process) or
    `ferry.runtime.local.LocalRunner` (threads of this process); which one:
    `ferry.core.runners`."""

    @property
    def reads_plan_file(self) -> bool:
        """Whether the job reads its plan from a file the cycle writes first."""
        ...

    def run(self, plan: PlanFile, plan_path: str | None = None) -> Copied:
        """The job's exit code and the run as it recorded it (None when it left none).
        `plan_path`: where the plan was written, for a runner that reads it there."""
        ...


class KeepsSessions(Protocol):
    """What the Spark runner keeps between a continuous loop's jobs (its Spark Connect
    sessions, `ferry.spark.connect.ConnectSessions`)."""

    @property
    def check(self) -> Any:
        """The check of this environment's Spark its jobs share
        (`ferry.spark.installed.SparkCheck`)."""
        ...

    def prepare(self, master: str) -> None:
        """Open what `master`'s jobs will need, off the first cycle's path."""
        ...

    def run_job(self, config_path: str, flow_name: str, plan_path: str, url: str,
                loaded: Flow | None = None) -> Copied:
        """A job on the Connect server at `url`, its session kept for the next."""
        ...

    def close(self) -> None: ...


class LoopRuntime(Protocol):
    """A continuous loop's runtime (`ferry.runtime.loop.Loop`): what lives from one cycle
    to the next (each flow's Delta recorder and kept lanes, the Spark runner's sessions).
    The loop makes one, passes it to its cycles, and closes it at its end."""

    sessions: KeepsSessions | None
    left_behind: LeftBehind
    """The threads of abandoned cycles and stuck producer calls still alive, and their
    bound (`ferry.kafka.stuck`)."""

    def end_at(self, when: float | None) -> None:
        """The loop ends at `when` (`time.monotonic`): no Delta batch that would outlast it
        starts."""
        ...

    def runner(self, flow: Flow) -> CopyRunner:
        """The local runner of the flow's cycles, its lanes and recorder the loop's."""
        ...

    def prepare(self, flow: Flow) -> None:
        """Ready the flow's local loop before its first cycle, off that cycle's path."""
        ...

    def started(self, flow: Flow) -> None:
        """The loop's first cycle is done: what `prepare` left for after it starts."""
        ...

    def records_behind(self, flow_name: str) -> bool:
        """Whether the flow's Delta is appended behind its copies (a recorder of this
        runtime's): a cycle then needs no job for an offset map Delta lacks."""
        ...

    def abandoned(self, flow_name: str, run_id: str) -> None:
        """The loop abandoned the cycle `run_id` as hung."""
        ...

    def close(self, hand_over: bool = False) -> None:
        """Close what the loop kept; `hand_over`: its next run follows at once."""
        ...


class NewestRuns(Protocol):
    """Where the flow's newest run is named and read (`ferry.kafka.runs.NewestRun`; the rule
    is `ferry.core.takeover`)."""

    def read(self) -> Named | None:
        """The run named newest; None when none is, or it could not be read."""
        ...

    def name(self, named: Named) -> bool:
        """Name `named` the newest; False when the principal may not (a warning says so)."""
        ...


class StateStore(Protocol):
    """What the steps read and append of a flow's state: its tables by name (the keys of
    `ferry.core.tables.SCHEMAS`), rows as dicts of the tables' columns
    (`ferry.state.store.DeltaStore` on Delta)."""

    def rows(self, table: str, flow: str, **equal: object) -> list[dict[str, Any]]:
        """The flow's rows of `table` whose columns equal `equal`."""
        ...

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Append `rows` (nothing for none), whole or not at all."""
        ...

    def last_steps(self, flow: str) -> dict[str, datetime]:
        """When each of the flow's paced steps last ran (the `syncs` table)."""
        ...

    def unrecorded_gaps(self, flow: str, gaps: Sequence[Gap]) -> list[Gap]:
        """The `gaps` the `gaps` table does not hold yet."""
        ...

    def map_rows(self, flow: str, topics: Collection[str] | None = None,
                 windows: Collection[MapWindow] | None = None) -> list[MapRow]:
        """The flow's offset-map rows (of `topics` only, when given; with `windows`, only
        the rows each reads of its source partition, `MapWindow`)."""
        ...


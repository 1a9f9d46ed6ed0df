"""What the steps need of the clusters, as small protocols (ports), and `KafkaCluster`, the
adapter-backed implementation a step builds from its flow when it is given none.

A step takes its clients as keyword-only parameters whose default (None) is the cluster of
its flow, as before: the CLI and the DAGs pass nothing, the integration tests run the steps
against brokers, and unit tests hand them in-memory fakes that satisfy these protocols.
Ferry's `Admin` already satisfies the ones made of its own methods (`topics`, `watermarks`,
`committed`, `group_offsets`); `KafkaCluster` adds the calls that live in `ferry.kafka`'s
functions (consumer groups, MM2's topics, records, topic IDs, the offset-map topic), each
delegated unchanged, so the contracts (retries, errors naming the cluster) are theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from ferry.config import Flow
from ferry.config.clients import ClientConfig
from ferry.core.checkpoints import Checkpoint, TargetGroup
from ferry.core.offsetmap import MapCursor, MapEntry
from ferry.core.planner import TopicPartition, Watermarks
from ferry.core.positions import PositionMoved, PositionWrite
from ferry.core.sync.acls import Acl
from ferry.core.sync.configs import AlterTopicConfig, ReplaceTopicConfig, TopicConfig
from ferry.core.sync.topics import TopicActions

if TYPE_CHECKING:
    from ferry.kafka.admin import Admin, TopicInfo
    from ferry.kafka.mm2topics import Appender, Record

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
    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None = None
                  ) -> dict[tuple[str, int], tuple[int, str]]:
        """(offset, metadata) of `group` on `tps` (default: every partition)."""
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


class PlanSource(SyncSource, ReadsWatermarks, HasTopicIds, Protocol):
    """The source as a cycle's plan (`ferry.steps.mirror.prepare`) reads it."""


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


class KafkaCluster:
    """One cluster through Ferry's Kafka adapters: every port above. The admin client is
    made on first use (reading records or appending needs none)."""

    def __init__(self, client: ClientConfig, admin: Admin | None = None) -> None:
        self.client = client
        self.cluster = client.cluster
        if admin is not None:
            self.__dict__["admin"] = admin

    @cached_property
    def admin(self) -> Admin:
        from ferry.kafka.admin import Admin

        return Admin(self.client)

    def topics(self) -> dict[str, TopicInfo]:
        return self.admin.topics()

    def watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        return self.admin.watermarks(tps)

    def ends(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks: beyond the last stable offset while a transaction is open."""
        return self.admin.ends(tps)

    def offsets_at(self, tps: Iterable[TopicPartition], time_ms: int
                   ) -> dict[TopicPartition, int]:
        return self.admin.offsets_at(tps, time_ms)

    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None = None
                  ) -> dict[tuple[str, int], tuple[int, str]]:
        return self.admin.committed(group, tps)

    def group_offsets(self, group: str, tps: Iterable[tuple[str, int]]) -> Offsets:
        return self.admin.group_offsets(group, tps)

    def topic_ids(self, names: Iterable[str]) -> dict[str, str]:
        from ferry.kafka.identity import topic_ids

        return topic_ids(self.admin, names)

    def list_groups(self) -> list[str]:
        from ferry.kafka.groups import list_groups

        return list_groups(self.admin)

    def describe_groups(self, groups: list[str]) -> dict[str, TargetGroup]:
        from ferry.kafka.groups import describe

        return describe(self.admin, groups)

    def commit(self, group: str, checkpoints: list[Checkpoint]) -> None:
        from ferry.kafka.groups import commit

        commit(self.admin, group, checkpoints)

    def alter_offsets(self, group: str, offsets: Sequence[tuple[str, int, int, str]],
                      action: str, needs: Mapping[str, str]) -> None:
        from ferry.kafka.groups import alter_offsets

        alter_offsets(self.admin, group, offsets, action, needs)

    def _is_target_of(self, flow: Flow) -> None:
        """The calls below write or read `flow`'s own topics and groups on its target,
        with the flow's producer and consumer settings for that cluster: they are made on
        the target's `KafkaCluster` only."""
        if self.cluster != flow.target:
            raise ValueError(f"cluster {self.cluster} is not the target of flow {flow.name} "
                             f"({flow.target})")

    def write_positions(self, flow: Flow, writes: Sequence[PositionWrite]
                        ) -> list[PositionMoved]:
        from ferry.kafka.positions import PositionWriter

        self._is_target_of(flow)
        with PositionWriter(flow) as writer:
            return writer.write_all(writes)

    def read_checkpoints(self, flow: Flow, topic: str) -> list[Checkpoint]:
        from ferry.kafka.groups import read_checkpoints

        self._is_target_of(flow)
        return read_checkpoints(flow, topic)

    def write_checkpoints(self, flow: Flow, topic: str, checkpoints: list[Checkpoint]
                          ) -> None:
        from ferry.kafka.groups import write_checkpoints

        self._is_target_of(flow)
        write_checkpoints(flow, topic, checkpoints)

    def ensure_mm2_topic(self, topic: str, replication_factor: int, setting: str) -> bool:
        from ferry.kafka import mm2topics

        return mm2topics.ensure(self.admin, topic, replication_factor, setting)

    @cached_property
    def _appender(self) -> Appender:
        from ferry.kafka.mm2topics import Appender

        return Appender(self.client)

    def append(self, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
        """With one producer for this cluster's life (a new one after an error)."""
        self._appender(topic, records)

    def read_all(self, topic: str, group: str) -> list[Record]:
        from ferry.kafka import mm2topics

        return mm2topics.read_all(self.client, topic, group)

    def digests(self, topic: str, partition: int, start: int, end: int, group: str,
                timeout: float) -> Iterator[tuple[int, bytes]]:
        from ferry.kafka.records import digest_stream

        return digest_stream(self.client, topic, partition, start, end, group, timeout)

    def timestamp_at(self, topic: str, partition: int, offset: int, group: str) -> int | None:
        from ferry.kafka.records import timestamp_at

        return timestamp_at(self.client, topic, partition, offset, group)

    def topic_configs(self, topics: Iterable[str]) -> dict[str, TopicConfig]:
        from ferry.kafka.configs import describe_topic_configs

        return describe_topic_configs(self.admin, topics)

    def acls(self) -> list[Acl]:
        from ferry.kafka.acls import describe_acls

        return describe_acls(self.admin)

    def apply_topology(self, flow: Flow, actions: TopicActions) -> None:
        from ferry.kafka.topology import apply_topology

        apply_topology(flow, self.admin, actions)

    def ensure_offset_map_topic(self, flow: Flow, existing: Collection[str] | None = None
                                ) -> None:
        from ferry.kafka.topology import ensure_offset_map_topic

        ensure_offset_map_topic(flow, self.admin, existing)

    def create_plain_topics(self, flow: Flow, partitions: dict[str, int]) -> list[str]:
        from ferry.kafka.topology import create_plain_topics

        return create_plain_topics(flow, self.admin, partitions)

    def alter_configs(self, changes: Iterable[AlterTopicConfig]) -> None:
        from ferry.kafka.configs import alter_incremental

        alter_incremental(self.admin, changes)

    def replace_configs(self, replacements: Iterable[ReplaceTopicConfig]) -> None:
        from ferry.kafka.configs import alter_legacy

        alter_legacy(self.admin, replacements)

    def create_acls(self, acls: Iterable[Acl]) -> None:
        from ferry.kafka.acls import create_acls

        create_acls(self.admin, acls)

    def map_cursor(self, flow: Flow) -> MapCursor:
        from ferry.kafka.mapreader import map_topic_facts
        from ferry.state.mapcursor import map_cursor

        self._is_target_of(flow)
        return map_cursor(flow, *map_topic_facts(flow, self.admin))

    def map_entries(self, flow: Flow, after: int) -> Iterator[tuple[int, MapEntry]]:
        """Read with the flow's target client (`flow.target_admin`, this cluster's)."""
        from ferry.kafka.mapreader import read_entries

        self._is_target_of(flow)
        return read_entries(flow, after)

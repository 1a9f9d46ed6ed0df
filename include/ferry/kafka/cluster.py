"""One Kafka cluster as a single object: Ferry's Kafka adapters (the admin client, consumer
groups, MM2's topics, records, topic IDs, the offset-map topic) bound to the cluster's
client settings, with the methods the steps' ports (`ferry.steps.ports`) ask for."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from ferry.config import Flow
from ferry.config.clients import ClientConfig
from ferry.core.checkpoints import Checkpoint, TargetGroup
from ferry.core.offsetmap import MapEntry
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


class KafkaCluster:
    """One cluster through Ferry's Kafka adapters: every port of `ferry.steps.ports` but the
    offset map's cursor, which reads Delta too (`ferry.steps.clusters.Cluster` adds it). The
    admin client is made on first use (reading records or appending needs none). Each call
    is delegated unchanged, so its contract (retries, errors naming the cluster) is the
    adapter's."""

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

    def log_starts(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.admin.log_starts(tps)

    def last_stable(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.admin.last_stable(tps)

    def ends(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks: beyond the last stable offset while a transaction is open."""
        return self.admin.ends(tps)

    def offsets_at(self, tps: Iterable[TopicPartition], time_ms: int
                   ) -> dict[TopicPartition, int]:
        return self.admin.offsets_at(tps, time_ms)

    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None = None,
                  stable: bool = True) -> dict[tuple[str, int], tuple[int, str]]:
        return self.admin.committed(group, tps, stable=stable)

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

    def map_topic_facts(self, flow: Flow) -> tuple[str, Callable[[], int]]:
        """The offset-map topic's ID ("" when it does not exist) and a call reading its end."""
        from ferry.kafka.mapreader import map_topic_facts

        self._is_target_of(flow)
        return map_topic_facts(flow, self.admin)

    def map_entries(self, flow: Flow, after: int) -> Iterator[tuple[int, MapEntry]]:
        """Read with the flow's target client (`flow.target_admin`, this cluster's)."""
        from ferry.kafka.mapreader import read_entries

        self._is_target_of(flow)
        return read_entries(flow, after)

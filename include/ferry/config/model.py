"""The resolved configuration: clusters, flows and their settings, as frozen values.

Everything downstream (planner, sync, DAG factory, CLI) reads these types, never the raw
properties. Client settings are librdkafka settings with secrets wrapped (`ferry.secrets`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ferry.config.clients import ClientConfig
from ferry.config.connections import Connection
from ferry.config.ferry_keys import FerrySettings
from ferry.mm2.filters import ConfigPropertyFilter, NameFilter
from ferry.mm2.policy import ReplicationPolicy


@dataclass(frozen=True)
class Interval:
    """A periodic MM2 feature: on or off, and how often. A negative interval means off.

    `explicit` says the interval was set in the config: Ferry's batch runs then do the
    feature at most that often; otherwise at every run (each run is a fresh look).
    """

    enabled: bool
    seconds: int
    explicit: bool = False

    @property
    def active(self) -> bool:
        return self.enabled and self.seconds >= 0

    def describe(self) -> str:
        if not self.enabled:
            return "off"
        if self.seconds < 0:
            return "off (negative interval)"
        return f"every {self.seconds}s"


@dataclass(frozen=True)
class Cluster:
    alias: str
    bootstrap_servers: str
    admin: ClientConfig
    connection: str = ""
    """The Airflow connection its client settings come from (`<alias>.ferry.connection`)."""


@dataclass(frozen=True)
class Flow:
    """One ordered cluster pair `source->target`, as MM2 would run it.

    `enabled` is whether records are mirrored (`A->B.enabled`); a pair that only emits
    heartbeats (MM2 creates one for every pair while heartbeats are on) has it False.
    """

    source: str
    target: str
    enabled: bool
    topics: NameFilter
    groups: NameFilter
    config_properties: ConfigPropertyFilter
    policy: ReplicationPolicy
    replication_factor: int
    refresh_topics: Interval
    refresh_groups: Interval
    sync_topic_configs: Interval
    sync_topic_acls: Interval
    emit_heartbeats: Interval
    emit_checkpoints: Interval
    sync_group_offsets: Interval
    heartbeats_replication: bool
    offset_lag_max: int
    use_defaults_from: str
    use_incremental_alter_configs: str
    tasks_max: int | None
    consumer: ClientConfig
    producer: ClientConfig
    source_admin: ClientConfig
    target_admin: ClientConfig
    ferry: FerrySettings
    checkpoints_replication_factor: int = 3
    """`checkpoints.topic.replication.factor`: for `<source>.checkpoints.internal`."""
    heartbeats_replication_factor: int = 3
    """`heartbeats.topic.replication.factor`: for `heartbeats` on the target."""
    settings: Mapping[str, str] = field(default_factory=dict)
    """The flow's resolved MM2 connector settings (secrets masked), for display."""
    target_partition_limit: int | None = None
    """Partitions per topic the target takes (an Event Hubs namespace's tier), or None."""
    mm2_offsets_topic: str = ""
    """Where MirrorMaker 2 run with this config keeps this flow's progress on the target
    (what `ferry adopt` reads by default): `offset.storage.topic`, else
    `<target>.offset.storage.topic`, else `mm2-offsets.<source>.internal`; a Strimzi
    resource sets the second to its Connect cluster's topic."""
    mm2_worker_group: str = ""
    """The group its Connect workers for this flow join on the target: `<target>.group.id`,
    else `<source>-mm2`."""
    source_alias: str | None = None
    """MM2's `source.cluster.alias`, when the config sets it (top level or per flow: MM2's
    connectors take it over the pair's source): the name remote topics, the checkpoints
    topic and heartbeats carry. None: the pair's source."""
    target_alias: str | None = None
    """MM2's `target.cluster.alias`, likewise (heartbeats, and the cycle check)."""

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def named_source(self) -> str:
        """The source's name in what MM2 writes (remote topics, checkpoints, heartbeats)."""
        return self.source if self.source_alias is None else self.source_alias

    @property
    def named_target(self) -> str:
        return self.target if self.target_alias is None else self.target_alias

    @property
    def dag_id(self) -> str:
        return dag_id_of(self.source, self.target)

    def remote_topic(self, topic: str) -> str:
        return self.policy.format_remote_topic(self.named_source, topic)


def _ident(alias: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", alias)


def dag_id_of(source: str, target: str) -> str:
    """The DAG id of the flow `source->target`."""
    return f"ferry_{_ident(source)}_to_{_ident(target)}"


def names_pair(name: str, source: str, target: str) -> bool:
    """Whether `name` names the flow `source->target`: `A->B`, its DAG id (`ferry_A_to_B`),
    or that id without its prefix (`A_to_B`, which needs no quoting in a shell)."""
    dag_id = dag_id_of(source, target)
    return name in (f"{source}->{target}", dag_id, dag_id.removeprefix("ferry_"))


@dataclass(frozen=True)
class Config:
    """A whole `mm2.properties` (or Strimzi resource), resolved and validated."""

    path: str
    clusters: Mapping[str, Cluster]
    flows: tuple[Flow, ...]
    warnings: tuple[str, ...] = ()
    translated: tuple[tuple[str, str], ...] = ()
    """For an MM1 setup: (its setting, what it became in Ferry), in the order read."""
    translated_from: str = ""
    """What `translated` came from ("Strimzi KafkaMirrorMaker", ...); "" for MM2."""
    connections: Mapping[str, Connection] = field(default_factory=dict, repr=False)
    """The Airflow connections its clusters' settings came from, by id: the copy job's
    lanes, which read the config again where Airflow is not, get them from a snapshot."""
    profiles: tuple[str, ...] = ()
    """What a service profile (Azure Event Hubs) set, or left as the config said."""

    @property
    def enabled_flows(self) -> tuple[Flow, ...]:
        return tuple(f for f in self.flows if f.enabled)

    def flow(self, name: str) -> Flow:
        """The flow named `A->B`, or by its DAG id (`ferry_A_to_B`, or `A_to_B`), which needs
        no quoting in a shell; KeyError names the flows there are."""
        for flow in self.flows:
            if flow.name == name:
                return flow
        by_id = [f for f in self.flows if names_pair(name, f.source, f.target)]
        if len(by_id) == 1:
            return by_id[0]
        known = ", ".join(f.name for f in self.enabled_flows) or "none"
        if len(by_id) > 1:
            raise KeyError(f"{name!r} is the DAG id of several flows "
                           f"({', '.join(f.name for f in by_id)}): name one as A->B, quoted")
        hint = ""
        if name.endswith("-"):  # `--flow a->b` unquoted: the shell redirected to a file `b`
            hint = (f"; unquoted, a shell reads the '>' of {name}>B as a redirect (and writes a "
                    f"file B): quote it, --flow '{name}>B', or give the DAG id's form, "
                    f"{_ident(name[:-1])}_to_B")
        raise KeyError(f"no flow {name!r} in {self.path} (enabled flows: {known}){hint}")

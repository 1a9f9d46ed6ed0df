"""Assemble flows from MM2 properties with MM2's precedence (`MirrorMakerConfig`).

For a pair S->T, later steps override earlier ones:

1. top-level keys that are MM2 connector settings (`topics`, `sync.topic.acls.enabled`...);
2. `replication.policy*`;
3. the source cluster's `S.*` keys as `source.cluster.*` / `source.consumer.*` ...,
   with top-level client keys (`security.protocol`, `ssl.*`, `sasl.*`) as fallbacks;
4. the target cluster's likewise as `target.*`;
5. `S->T.*` keys, prefix stripped: they win.

Clients then take the cluster's client keys, `consumer.*`, and `source.consumer.*`, as in
`MirrorConnectorConfig`. Consequence (as in MM2): `S.topics` is not a flow filter.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path

from ferry.config import eventhubs, names
from ferry.config.checks import (
    check_bootstrap,
    check_flow_keys,
    check_identity_loops,
    check_keys,
    cluster_aliases,
)
from ferry.config.clients import PASSTHROUGH_PREFIX, ClientConfig, translate_client
from ferry.config.connections import CONNECTION_KEY, Lookup
from ferry.config.connections import expand as expand_connections
from ferry.config.ferry_keys import resolve_ferry_settings
from ferry.config.findings import Findings
from ferry.config.mm1 import Translation
from ferry.config.model import Cluster, Config, Flow, names_pair
from ferry.config.providers import Providers
from ferry.config.reader import Reader
from ferry.config.values import Props, Value
from ferry.mm2.filters import (
    DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
    DEFAULT_GROUPS,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_TOPICS,
    DEFAULT_TOPICS_EXCLUDE,
    ConfigPropertyFilter,
    NameFilter,
)
from ferry.mm2.policy import (
    DEFAULT_POLICY_CLASS,
    IDENTITY_POLICY_CLASS,
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
)

log = logging.getLogger(__name__)


def build_config(
    raw: Mapping[str, str], path: str, base_dir: Path, env: Mapping[str, str] | None = None,
    translation: Translation | None = None, *, connections: bool | Collection[str] = True,
    flow: str | None = None, connection_lookup: Lookup | None = None,
) -> Config:
    """Validate and resolve raw MM2 properties; raise ConfigError listing every problem.
    `translation`: what the settings of an MM1 setup became (its warnings join the config's).
    `connections`: whose `ferry.connection` is looked up now: every cluster's (True), none
    (False), or only these aliases'; the others' client settings are not resolved.
    `connection_lookup`: where they are looked up before the environment's
    `AIRFLOW_CONN_<CONN_ID>` (Airflow's, a copy job's snapshot); None: the environment only.

    `flow` (`A->B`, or its DAG id): when it names one pair of the config's clusters, only
    that flow and its reverse (`B->A`, whose offset map serves fail-back) are built and
    validated, and `connections=True` means those two clusters' connections: what one
    flow's task and copy job need. A config of N clusters has N×(N−1) pairs (420 for 21),
    and building them all was most of a task's start. Any other `flow` builds every pair."""
    findings = Findings()
    for warning in translation.warnings if translation else ():
        findings.warn(warning)
    providers = Providers.declared(raw, findings, base_dir, env)
    props: Props = {}
    for key, text in raw.items():
        if key.startswith("config.providers"):
            continue
        resolved, from_provider = providers.resolve(key, text, findings)
        props[key] = Value.of(key, resolved, from_provider)

    aliases = cluster_aliases(props, findings)
    pairs = [(s, t) for s in aliases for t in aliases if s != t]
    named = [(s, t) for s, t in pairs if flow is not None and names_pair(flow, s, t)]
    if len(named) == 1:
        (source, target), = named
        pairs = [(source, target), (target, source)]
        if connections is True:
            connections = (source, target)
    if isinstance(connections, bool):
        wanted = set(aliases) if connections else set()
    else:
        wanted = set(connections)
    deferred = {a for a in aliases if a not in wanted and f"{a}.{CONNECTION_KEY}" in props}
    used = expand_connections(props, [a for a in aliases if a not in deferred], findings,
                              os.environ if env is None else env, connection_lookup)
    profiles = eventhubs.apply(props, aliases, findings)
    client_profiles: list[str] = []
    check_flow_keys(props, aliases, findings)
    check_keys(props, aliases, findings)
    clusters = {a: _cluster(props, a, findings, a in deferred) for a in aliases}
    # The clusters' own clients (heartbeats, topology, status) wait transient states out
    # as long as the top-level setting says, as the flows' clients do.
    retry = _top_retry_seconds(props)
    clusters = {a: replace(c, admin=replace(c.admin, retry_seconds=retry))
                for a, c in clusters.items()}
    top = Reader(props, findings)
    flows = tuple(_flow(props, s, t, base_dir, findings, client_profiles)
                  for s, t in pairs if _pair_exists(top, s, t))
    if not any(f.enabled for f in flows) and aliases:
        findings.warn("no flow is enabled: set e.g. "
                      f"{aliases[0]}->{aliases[-1]}.enabled=true")
    check_identity_loops(flows, findings)
    if deferred:  # their client settings come at run time: judged then, not now
        findings.problems = [p for p in findings.problems if not any(
            p.key.startswith(f"{a}.") and not p.key.startswith(f"{a}.ferry.")
            for a in deferred)]
    findings.raise_problems(path)
    return Config(path, clusters, flows, findings.distinct_warnings(),
                        tuple(translation.became) if translation else (),
                        translation.kind if translation else "", used,
                        tuple(dict.fromkeys((*profiles, *client_profiles))))


def _cluster_props(props: Props, alias: str) -> Props:
    """MM2's `clusterProps(alias)`: `alias.*` stripped, client keys copied to the roles."""
    prefix = alias + "."
    result: Props = {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}
    for key in [k for k in result if names.is_client_key(k)]:
        for role in ("producer.", "consumer.", "admin."):
            result.setdefault(role + key, result[key])
    for key, value in props.items():
        if names.is_client_key(key):
            for role in ("producer.", "consumer.", "admin."):
                result.setdefault(role + key, value)
            result.setdefault(key, value)
    return result


def _top_retry_seconds(props: Props) -> float:
    """The top-level `ferry.kafka.retry.seconds` (its default when unset; a bad value is
    reported once, through the flows that take it)."""
    from ferry.config.ferry_keys import BY_NAME

    key = BY_NAME["ferry.kafka.retry.seconds"]
    found = props.get(key.name)
    try:
        return float(key.parse(found.text if found is not None else key.default))
    except ValueError:
        return float(key.parse(key.default))


def _cluster(props: Props, alias: str, findings: Findings, deferred: bool = False) -> Cluster:
    """`deferred`: its Airflow connection is not looked up now, so its bootstrap servers may
    well be missing."""
    cprops = _cluster_props(props, alias)
    bootstrap = cprops.get("bootstrap.servers")
    if deferred and (bootstrap is None or not bootstrap.text.strip()):
        pass
    elif bootstrap is None or not bootstrap.text.strip():
        findings.problem(f"{alias}.bootstrap.servers", "missing",
                         f"set {alias}.bootstrap.servers=host:9092[,host2:9092]")
    else:
        check_bootstrap(bootstrap, findings)
    java = {k: v for k, v in cprops.items() if names.is_client_key(k)}
    java.update(_strip(cprops, "admin."))
    admin = translate_client(alias, "admin", java, _passthrough(cprops), findings)
    connection = cprops.get(CONNECTION_KEY)
    return Cluster(alias, bootstrap.text.strip() if bootstrap else "", admin,
                   connection.text.strip() if connection else "")


def _strip(props: Props, prefix: str) -> Props:
    return {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}


def _passthrough(cluster_props: Props) -> Props:
    return {k: v for k, v in cluster_props.items() if k.startswith(PASSTHROUGH_PREFIX)}


def _pair_exists(top: Reader, source: str, target: str) -> bool:
    """MM2's `clusterPairs`: a pair runs if enabled, or while it emits heartbeats."""
    prefix = f"{source}->{target}."
    enabled = top.boolean(prefix + "enabled", False)
    global_hb = top.boolean("emit.heartbeats.enabled", True)
    heartbeats = top.boolean(prefix + "emit.heartbeats.enabled", global_hb)
    return enabled or heartbeats


def connector_props(props: Props, source: str, target: str) -> Props:
    """MM2's `connectorBaseConfig(source->target)` over Ferry's values."""
    result: Props = {k: v for k, v in props.items() if k in names.CONNECTOR_KEYS}
    result.update({k: v for k, v in props.items() if k.startswith("replication.policy")})
    for side, alias in (("source", source), ("target", target)):
        cprops = _cluster_props(props, alias)
        for key, value in cprops.items():
            if key.startswith(("consumer", "producer", "admin")):
                result[f"{side}.{key}"] = value
            else:
                result[f"{side}.cluster.{key}"] = value
    result.update(_strip(props, f"{source}->{target}."))
    return result


def _client_java(conn: Props, side: str, role: str) -> Props:
    """MM2's `sourceConsumerConfig` / `targetProducerConfig` / `*AdminConfig`."""
    java = {k: v for k, v in _strip(conn, f"{side}.cluster.").items() if names.is_client_key(k)}
    # `consumer.poll.timeout.ms` and `admin.timeout.ms` are MM2's own connector settings,
    # not client settings that happen to share the prefix.
    java.update({k: v for k, v in _strip(conn, f"{role}.").items()
                 if f"{role}.{k}" not in names.CONNECTOR_KEYS})
    java.update(_strip(conn, f"{side}.{role}."))
    return java


def _flow(props: Props, source: str, target: str, base_dir: Path, findings: Findings,
          profiles: list[str]) -> Flow:
    """One flow, resolved; what a service profile did to its clients goes to `profiles`."""
    conn = Reader(connector_props(props, source, target), findings)
    enabled = conn.boolean("enabled", False)
    topics, groups, config_filter = _filters(conn)
    aliases = {key: value.text.strip() if (value := conn.props.get(key)) is not None else None
               for key in ("source.cluster.alias", "target.cluster.alias")}
    policy = _policy(conn, aliases["source.cluster.alias"]
                     if aliases["source.cluster.alias"] is not None else source)
    clients = _clients(props, conn.props, source, target, findings)
    ferry_values = {k: (v.text, v.origin) for k, v in props.items() if k.startswith("ferry.")}
    ferry_values.update({k: (v.text, v.origin) for k, v in conn.props.items()
                         if k.startswith("ferry.")})
    ferry = resolve_ferry_settings(ferry_values, base_dir, findings)
    # every client of the flow waits transient states out
    clients = {role: replace(c, retry_seconds=ferry.kafka_retry_seconds)
               for role, c in clients.items()}
    for role, client in clients.items():
        if eventhubs.is_hub(props, client.cluster):
            clients[role], shown = eventhubs.profile_client(client, findings)
            if enabled:  # validate shows what the profile does to the flows declared
                profiles += shown
    flow = Flow(
        source=source,
        target=target,
        enabled=enabled,
        topics=topics,
        groups=groups,
        config_properties=config_filter,
        policy=policy,
        replication_factor=conn.replication_factor(),
        checkpoints_replication_factor=conn.replication_factor(
            "checkpoints.topic.replication.factor", 3),
        heartbeats_replication_factor=conn.replication_factor(
            "heartbeats.topic.replication.factor", 3),
        refresh_topics=conn.interval("refresh.topics", True, 600),
        refresh_groups=conn.interval("refresh.groups", True, 600),
        sync_topic_configs=conn.interval("sync.topic.configs", True, 600),
        sync_topic_acls=conn.interval("sync.topic.acls", True, 600),
        emit_heartbeats=conn.interval("emit.heartbeats", True, 1),
        emit_checkpoints=conn.interval("emit.checkpoints", True, 60),
        sync_group_offsets=conn.interval("sync.group.offsets", False, 60),
        heartbeats_replication=conn.boolean("heartbeats.replication.enabled", True),
        offset_lag_max=conn.integer("offset.lag.max", 100, minimum=0),
        use_defaults_from=conn.choice("use.defaults.from", ("target", "source")),
        use_incremental_alter_configs=conn.choice("use.incremental.alter.configs",
                                                  ("requested", "required", "never")),
        tasks_max=conn.integer("tasks.max", 1, minimum=1) if "tasks.max" in conn.props else None,
        consumer=clients["consumer"],
        producer=clients["producer"],
        source_admin=clients["source_admin"],
        target_admin=clients["target_admin"],
        ferry=ferry,
        settings={k: v.shown() for k, v in sorted(conn.props.items())
                  if k in names.CONNECTOR_KEYS or k.startswith("replication.policy")},
        target_partition_limit=eventhubs.partition_limit(props, target),
        # MirrorMakerConfig.workerConfig: the target's settings, then the top-level storage
        # ones over them, then these defaults
        mm2_offsets_topic=_first(props, "offset.storage.topic", f"{target}.offset.storage.topic")
        or f"mm2-offsets.{source}.internal",
        mm2_worker_group=_first(props, f"{target}.group.id") or f"{source}-mm2",
        source_alias=aliases["source.cluster.alias"],
        target_alias=aliases["target.cluster.alias"],
    )
    if flow.enabled and flow.ferry.delivery == "exactly_once" and _is_event_hubs(flow.producer) \
            and flow.target_partition_limit is None:  # the profile shows its own line
        findings.warn(f"{flow.name}: the target looks like Azure Event Hubs; Event Hubs "
                      "Standard has no transactions: set "
                      f"{flow.name}.ferry.delivery=at_least_once")
    return flow


def _first(props: Props, *keys: str) -> str:
    """The first of `keys` set to a non-blank value, stripped; "" when none is."""
    for key in keys:
        value = props.get(key)
        if value is not None and value.text.strip():
            return value.text.strip()
    return ""


def _filters(conn: Reader) -> tuple[NameFilter, NameFilter, ConfigPropertyFilter]:
    """The flow's topic, group and config-property filters; MM2's filter classes only."""
    topics = _name_filter(_filter_value(conn, "topics", "topics", DEFAULT_TOPICS),
                          _filter_value(conn, "topics.exclude", "topics.blacklist",
                                        DEFAULT_TOPICS_EXCLUDE), conn.findings)
    groups = _name_filter(_filter_value(conn, "groups", "groups", DEFAULT_GROUPS),
                          _filter_value(conn, "groups.exclude", "groups.blacklist",
                                        DEFAULT_GROUPS_EXCLUDE), conn.findings)
    cfg_exclude = _filter_value(conn, "config.properties.exclude", "config.properties.blacklist",
                                DEFAULT_CONFIG_PROPERTIES_EXCLUDE)
    try:
        config_filter = ConfigPropertyFilter(cfg_exclude.text)
    except re.error as exc:
        conn.findings.problem(cfg_exclude.origin, f"invalid regular expression: {exc}",
                              "fix the pattern", cfg_exclude.text)
        config_filter = ConfigPropertyFilter()
    for key in ("topic.filter.class", "group.filter.class", "config.property.filter.class"):
        value = conn.props.get(key)
        if value is not None and not value.text.strip().endswith(names.DEFAULT_FILTERS[key]):
            conn.findings.problem(value.origin, "custom filter classes are Java-only",
                                  "express the filter with topics/topics.exclude, "
                                  "groups/groups.exclude, config.properties.exclude",
                                  value.text)
    return topics, groups, config_filter


def _filter_value(conn: Reader, key: str, old_key: str, default: str) -> Value:
    value = conn.props.get(key)
    if value is None and old_key in conn.props:
        value = conn.props[old_key]
        conn.findings.warn(f"{value.origin} is deprecated (removed in Kafka 4.0): rename it to "
                           f"{value.origin.replace(old_key, key)}")
    return value if value is not None else Value(default, key)


def _name_filter(include: Value, exclude: Value, findings: Findings) -> NameFilter:
    for value in (include, exclude):
        try:
            NameFilter(value.text, "")
        except re.error as exc:
            findings.problem(value.origin, f"invalid regular expression: {exc}",
                             "fix the pattern (MM2 matches whole names)", value.text)
            return NameFilter("", "")
    return NameFilter(include.text, exclude.text)


def _policy(conn: Reader, source: str) -> ReplicationPolicy:
    cls = conn.props.get("replication.policy.class")
    separator = conn.props.get("replication.policy.separator")
    # An empty separator is taken as given, as MM2 does: with IdentityReplicationPolicy, or
    # with an empty `source.cluster.alias`, the old way to keep topic names unchanged.
    sep = separator.text if separator is not None else "."
    internal = True
    if separator is not None:
        internal = conn.boolean("replication.policy.internal.topic.separator.enabled", True)
    name = cls.text.strip() if cls else DEFAULT_POLICY_CLASS
    if name == DEFAULT_POLICY_CLASS:
        return DefaultReplicationPolicy(sep, internal)
    if name == IDENTITY_POLICY_CLASS:
        return IdentityReplicationPolicy(sep, internal, source_alias=source)
    conn.findings.problem(cls.origin if cls else "replication.policy.class",
                          "unknown replication policy class", f"use {DEFAULT_POLICY_CLASS} "
                          f"or {IDENTITY_POLICY_CLASS}", name)
    return DefaultReplicationPolicy(sep, internal)


def _clients(props: Props, conn: Props, source: str, target: str,
             findings: Findings) -> dict[str, ClientConfig]:
    """The flow's consumer (of the source), producer (to the target) and both admins."""

    def client(side: str, alias: str, role: str) -> ClientConfig:
        return translate_client(alias, role, _client_java(conn, side, role),
                                _passthrough(_cluster_props(props, alias)), findings)

    clients = {"consumer": client("source", source, "consumer"),
               "producer": client("target", target, "producer"),
               "source_admin": client("source", source, "admin"),
               "target_admin": client("target", target, "admin")}
    clients["consumer"] = _consumer_defaults(clients["consumer"], f"{source}->{target}",
                                             findings)
    return clients


def _consumer_defaults(consumer: ClientConfig, flow: str, findings: Findings) -> ClientConfig:
    """MM2 forces no auto commit and defaults to earliest; Ferry also defaults to
    read_committed, so aborted transactional records are never mirrored."""
    settings = dict(consumer.settings)
    settings["enable.auto.commit"] = "false"
    settings.setdefault("auto.offset.reset", "earliest")
    if settings.setdefault("isolation.level", "read_committed") == "read_uncommitted":
        findings.warn(f"{flow}: the source consumer reads read_uncommitted, so records of "
                      "aborted transactions will be mirrored too")
    return ClientConfig(consumer.cluster, consumer.role, settings)


def _is_event_hubs(client: ClientConfig) -> bool:
    username = client.settings.get("sasl.username")
    servers = str(client.settings.get("bootstrap.servers", ""))
    return username == "$ConnectionString" or ".servicebus." in servers

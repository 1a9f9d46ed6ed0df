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
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from ferry.config import names
from ferry.config.clients import PASSTHROUGH_PREFIX, ClientConfig, translate_client
from ferry.config.ferry_keys import BY_NAME, resolve_ferry_settings, unknown_ferry_key
from ferry.config.model import Cluster, Flow, Interval, MirrorConfig
from ferry.config.providers import Providers
from ferry.config.values import Props, Value
from ferry.errors import ConfigError, Problem
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

_ALIAS = re.compile(r"^[A-Za-z0-9_\-]+$")


def build_config(
    raw: Mapping[str, str], path: str, base_dir: Path, env: Mapping[str, str] | None = None
) -> MirrorConfig:
    """Validate and resolve raw MM2 properties; raise ConfigError listing every problem."""
    problems: list[Problem] = []
    warnings: list[str] = []
    providers = Providers.declared(raw, problems, base_dir, env)
    props: Props = {}
    for key, text in raw.items():
        if key.startswith("config.providers"):
            continue
        resolved, from_provider = providers.resolve(key, text, problems)
        props[key] = Value.of(key, resolved, from_provider)

    aliases = _clusters(props, problems)
    _check_flow_keys(props, aliases, problems)
    _check_keys(props, aliases, problems, warnings)
    clusters = {a: _cluster(props, a, problems) for a in aliases}
    flows = tuple(
        _flow(props, s, t, base_dir, problems, warnings)
        for s in aliases for t in aliases
        if s != t and _pair_exists(props, s, t, problems)
    )
    if not any(f.enabled for f in flows) and aliases:
        warnings.append("no flow is enabled: set e.g. "
                        f"{aliases[0]}->{aliases[-1]}.enabled=true")
    _check_identity_loops(flows, warnings, problems)
    unique = list(dict.fromkeys(problems))
    if unique:
        raise ConfigError(unique, source=path)
    return MirrorConfig(path, clusters, flows, tuple(dict.fromkeys(warnings)))


def _clusters(props: Props, problems: list[Problem]) -> list[str]:
    value = props.get("clusters")
    if value is None or not value.text.strip():
        problems.append(Problem("clusters", "missing: the config names no clusters",
                                "add clusters=source, target and <alias>.bootstrap.servers"))
        return []
    aliases = [a for a in re.split(r"\s*,\s*", value.text.strip()) if a]
    result: list[str] = []
    for alias in aliases:
        if not _ALIAS.match(alias) or "->" in alias:
            problems.append(Problem("clusters", f"alias {alias!r} may use only letters, digits,"
                                    " '_' and '-' (no '.', no '->')", "rename it", value.text))
        elif alias in result:
            problems.append(Problem("clusters", f"alias {alias!r} is listed twice",
                                    "list each cluster once", value.text))
        else:
            result.append(alias)
    return result


_FLOW_KEY = re.compile(r"^(?P<source>[^.]*?)->(?P<rest>.+)$")


def _split_flow_key(key: str, aliases: list[str]) -> tuple[str, str, str] | None:
    """(source, target, setting) of a `S->T.setting` key, or None if it is not one."""
    match = _FLOW_KEY.match(key)
    if match is None:
        return None
    source, rest = match.group("source"), match.group("rest")
    for alias in sorted(aliases, key=len, reverse=True):
        if rest.startswith(alias + "."):
            return source, alias, rest[len(alias) + 1 :]
    target, _, setting = rest.partition(".")
    return source, target, setting


def _check_flow_keys(props: Props, aliases: list[str], problems: list[Problem]) -> None:
    for key in props:
        parts = _split_flow_key(key, aliases)
        if parts is None:
            continue
        source, target, _ = parts
        for role, alias in (("source", source), ("target", target)):
            if alias not in aliases:
                problems.append(Problem(key, f"names unknown {role} cluster {alias!r}",
                                        f"add it to clusters (now: {', '.join(aliases)}) "
                                        "or correct the alias"))
        if source == target and source in aliases:
            problems.append(Problem(key, f"a flow from cluster {source!r} to itself",
                                    "a flow needs two different clusters"))


def _check_keys(props: Props, aliases: list[str], problems: list[Problem],
                warnings: list[str]) -> None:
    """Unknown `ferry.` keys are errors; keys MM2 would silently ignore are warnings."""
    for key in props:
        flow = _split_flow_key(key, aliases)
        setting = flow[2] if flow is not None else key
        if setting.startswith(names.TRANSFORM_PREFIXES):
            problems.append(Problem(key, "Connect transforms and predicates change records; "
                                    "Ferry mirrors them byte for byte",
                                    "remove it (transform downstream of the mirror)"))
            continue
        if flow is not None:
            if setting.startswith("ferry.") and setting not in BY_NAME:
                problems.append(unknown_ferry_key(key, setting))
            continue
        cluster = next((a for a in aliases if key.startswith(a + ".")), None)
        if cluster is not None:
            setting = key[len(cluster) + 1 :]
            if setting.startswith("ferry.") and not setting.startswith(PASSTHROUGH_PREFIX):
                problems.append(Problem(key, "unknown cluster-level Ferry setting",
                                        f"only {cluster}.{PASSTHROUGH_PREFIX}<property> is "
                                        "cluster-level; flow settings go to ferry.* or "
                                        "S->T.ferry.*"))
            elif setting in names.CONNECTOR_KEYS:
                warnings.append(f"{key} has no effect: MM2 reads {setting} at the top level or "
                                f"per flow ({setting} or <source>->{'<target>'}.{setting}), "
                                "not per cluster")
            continue
        if key.startswith("ferry."):
            if key not in BY_NAME:
                problems.append(unknown_ferry_key(key, key))
        elif key in names.FLOW_ONLY_KEYS:
            warnings.append(f"{key} is ignored at the top level (as by MM2): set it per flow, "
                            f"<source>->{'<target>'}.{key}")
        elif key in names.CONNECTOR_KEYS:
            pass
        elif key.startswith(("consumer.", "producer.", "admin.")):
            warnings.append(f"{key} is ignored (as by MM2): client settings go per cluster "
                            f"(<alias>.{key}) or per flow (<source>->{'<target>'}.{key})")
        elif not names.is_known_top_level(key):
            warnings.append(f"{key} is not an MM2 or Ferry setting and is ignored")


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


def _cluster(props: Props, alias: str, problems: list[Problem]) -> Cluster:
    cprops = _cluster_props(props, alias)
    bootstrap = cprops.get("bootstrap.servers")
    if bootstrap is None or not bootstrap.text.strip():
        problems.append(Problem(f"{alias}.bootstrap.servers", "missing",
                                f"set {alias}.bootstrap.servers=host:9092[,host2:9092]"))
    else:
        _check_bootstrap(bootstrap, problems)
    java = {k: v for k, v in cprops.items() if names.is_client_key(k)}
    java.update(_strip(cprops, "admin."))
    admin = translate_client(alias, "admin", java, _passthrough(cprops), problems)
    return Cluster(alias, bootstrap.text.strip() if bootstrap else "", admin)


def _check_bootstrap(value: Value, problems: list[Problem]) -> None:
    for server in re.split(r"\s*,\s*", value.text.strip()):
        host, _, port = server.rpartition(":")
        host = re.sub(r"^[A-Za-z_]+://", "", host)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            problems.append(Problem(value.origin, f"{server!r} is not host:port",
                                    "list brokers as host:port separated by commas",
                                    value.shown()))


def _strip(props: Props, prefix: str) -> Props:
    return {k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)}


def _passthrough(cluster_props: Props) -> Props:
    return {k: v for k, v in cluster_props.items() if k.startswith(PASSTHROUGH_PREFIX)}


def _bool(props: Props, key: str, default: bool, problems: list[Problem]) -> bool:
    value = props.get(key)
    if value is None:
        return default
    text = value.text.strip().lower()
    if text not in ("true", "false"):
        problems.append(Problem(value.origin, "must be true or false",
                                f"set {value.origin}={'true' if default else 'false'}",
                                value.shown()))
        return default
    return text == "true"


def _int(props: Props, key: str, default: int, problems: list[Problem],
         minimum: int | None = None) -> int:
    value = props.get(key)
    if value is None:
        return default
    try:
        number = int(value.text.strip())
    except ValueError:
        problems.append(Problem(value.origin, "must be a whole number",
                                f"e.g. {value.origin}={default}", value.shown()))
        return default
    if minimum is not None and number < minimum:
        problems.append(Problem(value.origin, f"must be at least {minimum}",
                                f"e.g. {value.origin}={default}", value.shown()))
        return default
    return number


def _choice(props: Props, key: str, options: tuple[str, ...], problems: list[Problem]) -> str:
    value = props.get(key)
    if value is None:
        return options[0]
    text = value.text.strip().lower()
    if text not in options:
        problems.append(Problem(value.origin, f"must be one of {', '.join(options)}",
                                f"set {value.origin}={options[0]}", value.shown()))
        return options[0]
    return text


def _pair_exists(props: Props, source: str, target: str, problems: list[Problem]) -> bool:
    """MM2's `clusterPairs`: a pair runs if enabled, or while it emits heartbeats."""
    prefix = f"{source}->{target}."
    enabled = _bool(props, prefix + "enabled", False, problems)
    global_hb = _bool(props, "emit.heartbeats.enabled", True, problems)
    heartbeats = _bool(props, prefix + "emit.heartbeats.enabled", global_hb, problems)
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


def _policy(conn: Props, source: str, problems: list[Problem]) -> ReplicationPolicy:
    cls = conn.get("replication.policy.class")
    separator = conn.get("replication.policy.separator")
    sep = separator.text if separator is not None else "."
    if separator is not None and sep == "":
        problems.append(Problem(separator.origin, "must not be empty",
                                f"set {separator.origin}=."))
        sep = "."
    internal = True
    if separator is not None:
        internal = _bool(conn, "replication.policy.internal.topic.separator.enabled", True,
                         problems)
    name = cls.text.strip() if cls else DEFAULT_POLICY_CLASS
    if name == DEFAULT_POLICY_CLASS:
        return DefaultReplicationPolicy(sep, internal)
    if name == IDENTITY_POLICY_CLASS:
        return IdentityReplicationPolicy(sep, internal, source_alias=source)
    problems.append(Problem(cls.origin if cls else "replication.policy.class",
                            "unknown replication policy class", f"use {DEFAULT_POLICY_CLASS} "
                            f"or {IDENTITY_POLICY_CLASS}", name))
    return DefaultReplicationPolicy(sep, internal)


def _filter_value(conn: Props, key: str, old_key: str, default: str,
                  warnings: list[str]) -> Value:
    value = conn.get(key)
    if value is None and old_key in conn:
        value = conn[old_key]
        warnings.append(f"{value.origin} is deprecated (removed in Kafka 4.0): rename it to "
                        f"{value.origin.replace(old_key, key)}")
    return value if value is not None else Value(default, key)


def _name_filter(include: Value, exclude: Value, problems: list[Problem]) -> NameFilter:
    for value in (include, exclude):
        try:
            NameFilter(value.text, "")
        except re.error as exc:
            problems.append(Problem(value.origin, f"invalid regular expression: {exc}",
                                    "fix the pattern (MM2 matches whole names)", value.text))
            return NameFilter("", "")
    return NameFilter(include.text, exclude.text)


def _feature(conn: Props, name: str, default_on: bool, default_seconds: int,
             problems: list[Problem]) -> Interval:
    enabled = _bool(conn, f"{name}.enabled", default_on, problems)
    seconds = _int(conn, f"{name}.interval.seconds", default_seconds, problems)
    return Interval(enabled, seconds, explicit=f"{name}.interval.seconds" in conn)


def _flow(props: Props, source: str, target: str, base_dir: Path, problems: list[Problem],
          warnings: list[str]) -> Flow:
    conn = connector_props(props, source, target)
    enabled = _bool(conn, "enabled", False, problems)
    topics = _name_filter(_filter_value(conn, "topics", "topics", DEFAULT_TOPICS, warnings),
                          _filter_value(conn, "topics.exclude", "topics.blacklist",
                                        DEFAULT_TOPICS_EXCLUDE, warnings), problems)
    groups = _name_filter(_filter_value(conn, "groups", "groups", DEFAULT_GROUPS, warnings),
                          _filter_value(conn, "groups.exclude", "groups.blacklist",
                                        DEFAULT_GROUPS_EXCLUDE, warnings), problems)
    cfg_exclude = _filter_value(conn, "config.properties.exclude", "config.properties.blacklist",
                                DEFAULT_CONFIG_PROPERTIES_EXCLUDE, warnings)
    try:
        config_filter = ConfigPropertyFilter(cfg_exclude.text)
    except re.error as exc:
        problems.append(Problem(cfg_exclude.origin, f"invalid regular expression: {exc}",
                                "fix the pattern", cfg_exclude.text))
        config_filter = ConfigPropertyFilter()
    for key in ("topic.filter.class", "group.filter.class", "config.property.filter.class"):
        value = conn.get(key)
        if value is not None and not value.text.strip().endswith(names.DEFAULT_FILTERS[key]):
            problems.append(Problem(value.origin, "custom filter classes are Java-only",
                                    "express the filter with topics/topics.exclude, "
                                    "groups/groups.exclude, config.properties.exclude",
                                    value.text))
    policy = _policy(conn, source, problems)
    tasks = conn.get("tasks.max")
    sides = {"consumer": ("source", source), "producer": ("target", target)}
    clients: dict[str, ClientConfig] = {}
    for role, (side, alias) in sides.items():
        java = _client_java(conn, side, role)
        clients[role] = translate_client(alias, role, java,
                                         _passthrough(_cluster_props(props, alias)), problems)
    admins = {
        side: translate_client(alias, "admin", _client_java(conn, side, "admin"),
                               _passthrough(_cluster_props(props, alias)), problems)
        for side, alias in (("source", source), ("target", target))
    }
    consumer = _consumer_defaults(clients["consumer"], conn, warnings, f"{source}->{target}")
    ferry_values = {k: (v.text, v.origin) for k, v in props.items() if k.startswith("ferry.")}
    ferry_values.update({k: (v.text, v.origin) for k, v in conn.items()
                         if k.startswith("ferry.")})
    ferry = resolve_ferry_settings(ferry_values, base_dir, problems)
    budget = ferry.kafka_retry_seconds  # every client of the flow waits transient states out

    def budgeted(client: ClientConfig) -> ClientConfig:
        return replace(client, retry_seconds=budget)

    flow = Flow(
        source=source,
        target=target,
        enabled=enabled,
        topics=topics,
        groups=groups,
        config_properties=config_filter,
        policy=policy,
        replication_factor=_replication_factor(conn, problems),
        checkpoints_replication_factor=_replication_factor(
            conn, problems, "checkpoints.topic.replication.factor", 3),
        heartbeats_replication_factor=_replication_factor(
            conn, problems, "heartbeats.topic.replication.factor", 3),
        refresh_topics=_feature(conn, "refresh.topics", True, 600, problems),
        refresh_groups=_feature(conn, "refresh.groups", True, 600, problems),
        sync_topic_configs=_feature(conn, "sync.topic.configs", True, 600, problems),
        sync_topic_acls=_feature(conn, "sync.topic.acls", True, 600, problems),
        emit_heartbeats=_feature(conn, "emit.heartbeats", True, 1, problems),
        emit_checkpoints=_feature(conn, "emit.checkpoints", True, 60, problems),
        sync_group_offsets=_feature(conn, "sync.group.offsets", False, 60, problems),
        heartbeats_replication=_bool(conn, "heartbeats.replication.enabled", True, problems),
        offset_lag_max=_int(conn, "offset.lag.max", 100, problems, minimum=0),
        use_defaults_from=_choice(conn, "use.defaults.from", ("target", "source"), problems),
        use_incremental_alter_configs=_choice(conn, "use.incremental.alter.configs",
                                              ("requested", "required", "never"), problems),
        tasks_max=_int(conn, "tasks.max", 1, problems, minimum=1) if tasks else None,
        consumer=budgeted(consumer),
        producer=budgeted(clients["producer"]),
        source_admin=budgeted(admins["source"]),
        target_admin=budgeted(admins["target"]),
        ferry=ferry,
        settings={k: v.shown() for k, v in sorted(conn.items())
                  if k in names.CONNECTOR_KEYS or k.startswith("replication.policy")},
    )
    if flow.enabled and flow.ferry.delivery == "exactly_once" and _is_event_hubs(flow.producer):
        warnings.append(f"{flow.name}: the target looks like Azure Event Hubs; Event Hubs "
                        "Standard has no transactions: set "
                        f"{flow.name}.ferry.delivery=at_least_once")
    return flow


def _replication_factor(conn: Props, problems: list[Problem], key: str = "replication.factor",
                        default: int = 2) -> int:
    factor = _int(conn, key, default, problems)
    if factor == 0 or factor < -1:
        value = conn[key]
        problems.append(Problem(value.origin, "must be at least 1, or -1 for the broker's "
                                "default", f"set {value.origin}=3", value.text))
        return default
    return factor


def _consumer_defaults(consumer: ClientConfig, conn: Props, warnings: list[str],
                       flow: str) -> ClientConfig:
    """MM2 forces no auto commit and defaults to earliest; Ferry also defaults to
    read_committed, so aborted transactional records are never mirrored."""
    settings = dict(consumer.settings)
    settings["enable.auto.commit"] = "false"
    settings.setdefault("auto.offset.reset", "earliest")
    if settings.setdefault("isolation.level", "read_committed") == "read_uncommitted":
        warnings.append(f"{flow}: the source consumer reads read_uncommitted, so records of "
                        "aborted transactions will be mirrored too")
    return ClientConfig(consumer.cluster, consumer.role, settings)


def _is_event_hubs(client: ClientConfig) -> bool:
    username = client.settings.get("sasl.username")
    servers = str(client.settings.get("bootstrap.servers", ""))
    return username == "$ConnectionString" or ".servicebus." in servers


def _check_identity_loops(flows: tuple[Flow, ...], warnings: list[str],
                          problems: list[Problem]) -> None:
    """Flows both ways between two clusters with IdentityReplicationPolicy send every
    record back where it came from (the policy cannot tell remote topics from local ones):
    refused unless `ferry.identity.loops.accepted=true` says the operator knows (e.g. the
    topic filters of the two directions do not overlap)."""
    enabled = {(f.source, f.target): f for f in flows if f.enabled}
    for (source, target), flow in enabled.items():
        back = enabled.get((target, source))
        if (source < target and back is not None
                and (isinstance(flow.policy, IdentityReplicationPolicy)
                     or isinstance(back.policy, IdentityReplicationPolicy))):
            text = (f"{source}->{target} and {target}->{source} both run and one uses "
                    "IdentityReplicationPolicy: records can loop between the clusters")
            if flow.ferry.identity_loops_accepted or back.ferry.identity_loops_accepted:
                warnings.append(text + " (accepted by ferry.identity.loops.accepted)")
            else:
                problems.append(Problem(
                    f"{source}->{target}.enabled", text,
                    "mirror one way only, use DefaultReplicationPolicy, or make the topic "
                    "filters disjoint and set ferry.identity.loops.accepted=true"))

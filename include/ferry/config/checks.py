"""Checks of a config's names: the cluster list, flow keys, where each key sits, bootstrap
lists and identity loops. They only report (into `Findings`); `mm2` builds the flows.

Where a key may sit is a table, `KEY_RULES`: each key is placed (a flow's `S->T.<setting>`,
a cluster's `<alias>.<setting>`, or the top level) and meets the first rule for its place
that applies to it. Unknown `ferry.` keys are errors; keys MM2 would silently ignore are
warnings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from ferry.config import names
from ferry.config.clients import PASSTHROUGH_PREFIX
from ferry.config.connections import CONNECTION_KEY
from ferry.config.eventhubs import TIER_KEY
from ferry.config.ferry_keys import BY_NAME, suggest_ferry_key
from ferry.config.findings import Findings
from ferry.config.model import Flow
from ferry.config.values import Props, Value
from ferry.mm2.policy import IdentityReplicationPolicy

_ALIAS = re.compile(r"^[A-Za-z0-9_\-]+$")
_FLOW_KEY = re.compile(r"^(?P<source>[^.]*?)->(?P<rest>.+)$")


def cluster_aliases(props: Props, findings: Findings) -> list[str]:
    """The aliases of `clusters`, each once; a bad or repeated alias is a problem."""
    value = props.get("clusters")
    if value is None or not value.text.strip():
        findings.problem("clusters", "missing: the config names no clusters",
                         "add clusters=source, target and <alias>.bootstrap.servers")
        return []
    aliases = [a for a in re.split(r"\s*,\s*", value.text.strip()) if a]
    result: list[str] = []
    for alias in aliases:
        if not _ALIAS.match(alias) or "->" in alias:
            findings.problem("clusters", f"alias {alias!r} may use only letters, digits,"
                             " '_' and '-' (no '.', no '->')", "rename it", value.text)
        elif alias in result:
            findings.problem("clusters", f"alias {alias!r} is listed twice",
                             "list each cluster once", value.text)
        else:
            result.append(alias)
    return result


def split_flow_key(key: str, aliases: list[str]) -> tuple[str, str, str] | None:
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


def check_flow_keys(props: Props, aliases: list[str], findings: Findings) -> None:
    """A `S->T.` key names two different clusters of `clusters`."""
    for key in props:
        parts = split_flow_key(key, aliases)
        if parts is None:
            continue
        source, target, _ = parts
        for role, alias in (("source", source), ("target", target)):
            if alias not in aliases:
                findings.problem(key, f"names unknown {role} cluster {alias!r}",
                                 f"add it to clusters (now: {', '.join(aliases)}) "
                                 "or correct the alias")
        if source == target and source in aliases:
            findings.problem(key, f"a flow from cluster {source!r} to itself",
                             "a flow needs two different clusters")


Place = Literal["flow", "cluster", "top"]


@dataclass(frozen=True)
class Key:
    """A key as written, where it sits, and its setting (the key without its flow or
    cluster prefix; the key itself at the top level)."""

    key: str
    place: Place
    setting: str
    cluster: str = ""
    """The alias of a cluster's key."""

    @classmethod
    def placed(cls, key: str, aliases: list[str]) -> Key:
        flow = split_flow_key(key, aliases)
        if flow is not None:
            return cls(key, "flow", flow[2])
        cluster = next((a for a in aliases if key.startswith(a + ".")), None)
        if cluster is not None:
            return cls(key, "cluster", key[len(cluster) + 1 :], cluster)
        return cls(key, "top", key)


@dataclass(frozen=True)
class KeyRule:
    """Keys at one of `places` for which `applies` holds get `message` as a problem (with
    `fix`) or a warning; an "ok" rule accepts the key. The first rule that applies wins.

    `message` and `fix` are templates over {key}, {setting} and {cluster}; `fix` may also
    be a function of the setting.
    """

    places: tuple[Place, ...]
    applies: Callable[[Key], bool]
    outcome: Literal["problem", "warning", "ok"]
    message: str = ""
    fix: str | Callable[[str], str] = ""

    def report(self, key: Key, findings: Findings) -> None:
        fields = {"key": key.key, "setting": key.setting, "cluster": key.cluster}
        if self.outcome == "problem":
            fix = self.fix(key.setting) if callable(self.fix) else self.fix.format(**fields)
            findings.problem(key.key, self.message.format(**fields), fix)
        elif self.outcome == "warning":
            findings.warn(self.message.format(**fields))


def _unknown_ferry_key(key: Key) -> bool:
    return key.setting.startswith("ferry.") and key.setting not in BY_NAME


def _cluster_ferry_key(key: Key) -> bool:
    """A cluster's Ferry settings: `<alias>.ferry.librdkafka.*` and `<alias>.ferry.connection`
    (an Airflow connection holding its client settings)."""
    return (key.setting.startswith("ferry.") and key.setting not in (CONNECTION_KEY, TIER_KEY)
            and not key.setting.startswith(PASSTHROUGH_PREFIX))


def _is_transform(key: Key) -> bool:
    """Connect's transforms/predicates, at the top level or per flow. A cluster's key is
    matched as written, so `A.transforms` (which MM2 ignores) passes."""
    checked = key.key if key.place == "cluster" else key.setting
    return checked.startswith(names.TRANSFORM_PREFIXES)


_ANYWHERE: Final[tuple[Place, ...]] = ("flow", "cluster", "top")
_CLIENT_ROLES: Final = ("consumer.", "producer.", "admin.")

KEY_RULES: Final[tuple[KeyRule, ...]] = (
    KeyRule(_ANYWHERE, _is_transform, "problem",
            "Connect transforms and predicates change records; Ferry mirrors them byte for byte",
            "remove it (transform downstream of the mirror)"),
    KeyRule(("flow", "top"), _unknown_ferry_key, "problem", "unknown Ferry setting",
            suggest_ferry_key),
    KeyRule(("cluster",), _cluster_ferry_key, "problem", "unknown cluster-level Ferry setting",
            f"only {{cluster}}.{PASSTHROUGH_PREFIX}<property>, {{cluster}}.{CONNECTION_KEY} and "
            f"{{cluster}}.{TIER_KEY} are cluster-level; flow settings go to ferry.* or "
            "S->T.ferry.*"),
    KeyRule(("cluster",), lambda k: k.setting in names.CONNECTOR_KEYS, "warning",
            "{key} has no effect: MM2 reads {setting} at the top level or per flow "
            "({setting} or <source>-><target>.{setting}), not per cluster"),
    KeyRule(("top",), lambda k: k.key in names.FLOW_ONLY_KEYS, "warning",
            "{key} is ignored at the top level (as by MM2): set it per flow, "
            "<source>-><target>.{key}"),
    # MM2's connector settings, even those named like client keys (consumer.poll.timeout.ms)
    KeyRule(("top",), lambda k: k.key in names.CONNECTOR_KEYS, "ok"),
    KeyRule(("top",), lambda k: k.key.startswith(_CLIENT_ROLES), "warning",
            "{key} is ignored (as by MM2): client settings go per cluster (<alias>.{key}) "
            "or per flow (<source>-><target>.{key})"),
    KeyRule(("top",), lambda k: not names.is_known_top_level(k.key), "warning",
            "{key} is not an MM2 or Ferry setting and is ignored"),
)


BYTE_ARRAY_CONVERTER: Final = "org.apache.kafka.connect.converters.ByteArrayConverter"
CONVERTER_KEYS: Final = ("key.converter", "value.converter", "header.converter")


def _check_converter(key: Key, value: Value, findings: Findings) -> bool:
    """A converter other than MM2's ByteArrayConverter, at the top level or per flow: MM2's
    worker would apply it (JsonConverter wraps every record in JSON), while Ferry copies
    records byte for byte, so the two would write different records. Refused."""
    if key.place not in ("top", "flow") or key.setting not in CONVERTER_KEYS:
        return False
    if value.text.strip() != BYTE_ARRAY_CONVERTER:
        findings.problem(key.key, f"MM2's worker would write records through "
                                  f"{value.text.strip() or 'no converter'}; Ferry copies them "
                                  "byte for byte", f"remove it (MM2's default is "
                                  f"{BYTE_ARRAY_CONVERTER}) and convert downstream",
                         value.shown())
    return True


def check_keys(props: Props, aliases: list[str], findings: Findings) -> None:
    """Each key meets the first rule of `KEY_RULES` for its place that applies to it."""
    for name in props:
        key = Key.placed(name, aliases)
        if _check_converter(key, props[name], findings):
            continue
        rule = next((r for r in KEY_RULES if key.place in r.places and r.applies(key)), None)
        if rule is not None:
            rule.report(key, findings)


def check_bootstrap(value: Value, findings: Findings) -> None:
    """Each server of a bootstrap list is host:port (a `scheme://` prefix is allowed)."""
    for server in re.split(r"\s*,\s*", value.text.strip()):
        host, _, port = server.rpartition(":")
        host = re.sub(r"^[A-Za-z_]+://", "", host)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            findings.problem(value.origin, f"{server!r} is not host:port",
                             "list brokers as host:port separated by commas", value.shown())


def check_identity_loops(flows: tuple[Flow, ...], findings: Findings) -> None:
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
                findings.warn(text + " (accepted by ferry.identity.loops.accepted)")
            else:
                findings.problem(
                    f"{source}->{target}.enabled", text,
                    "mirror one way only, use DefaultReplicationPolicy, or make the topic "
                    "filters disjoint and set ferry.identity.loops.accepted=true")

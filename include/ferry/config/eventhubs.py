"""Azure Event Hubs, by profile: a cluster whose bootstrap host is an Event Hubs namespace
(`*.servicebus.windows.net`, or a sovereign cloud's `servicebus` domain) gets the service's
known limits, unless the config says otherwise, and `ferry validate` shows each.

- Clients: `connections.max.idle.ms` and `metadata.max.age.ms` at 180000 (the service drops
  idle connections after 240 s), `request.timeout.ms` at 60000.
- Refused: a producer compression other than gzip (the only one the service takes), and
  `max.request.size` above 1,046,528 bytes.
- A flow into it: no ACL or config sync (the service has neither API), and at-least-once
  delivery unless the flow opts into transactions (`ferry.delivery=exactly_once`, Premium
  or Dedicated).
- Partitions per event hub are capped by the tier, `<alias>.ferry.eventhubs.tier`
  (`standard` 32 by default, `basic` 32, `premium` 100, `dedicated` 1024): a source topic
  with more partitions stops the run before anything is copied.

Pure: properties in, properties out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ferry.config.clients import ClientConfig
from ferry.config.findings import Findings
from ferry.config.values import Props, Value

TIER_KEY = "ferry.eventhubs.tier"
"""The cluster key (`<alias>.ferry.eventhubs.tier`) naming the namespace's tier."""
PARTITION_LIMITS = {"basic": 32, "standard": 32, "premium": 100, "dedicated": 1024}
MAX_REQUEST_SIZE = 1_046_528
_NAMESPACE = re.compile(r"\.servicebus\.(windows\.net|chinacloudapi\.cn|usgovcloudapi\.net)$",
                        re.IGNORECASE)
CLIENT_DEFAULTS = {"connections.max.idle.ms": ("180000", ("consumer", "producer", "admin")),
                   "metadata.max.age.ms": ("180000", ("consumer", "producer", "admin")),
                   "request.timeout.ms": ("60000", ("producer",))}
FLOW_DEFAULTS = {"sync.topic.acls.enabled": ("false", "Event Hubs has no Kafka ACL API"),
                 "sync.topic.configs.enabled": ("false", "Event Hubs has no topic config API"),
                 "ferry.delivery": ("at_least_once", "Event Hubs Standard has no transactions; "
                                    "set ferry.delivery=exactly_once on Premium or Dedicated")}
COMPRESSIONS = ("none", "gzip")


def is_namespace(bootstrap_servers: str) -> bool:
    """Whether any server of a bootstrap list is an Event Hubs namespace."""
    for server in bootstrap_servers.split(","):
        host = re.sub(r"^[A-Za-z_]+://", "", server.strip()).rsplit(":", 1)[0]
        if _NAMESPACE.search(host):
            return True
    return False


def is_hub(props: Props, alias: str) -> bool:
    """Whether `alias` is an Event Hubs namespace: by its bootstrap host, or because the
    config names its tier (a namespace behind a private endpoint's own DNS name)."""
    servers = props.get(f"{alias}.bootstrap.servers")
    return f"{alias}.{TIER_KEY}" in props or (servers is not None
                                               and is_namespace(servers.text))


def apply(props: Props, aliases: Iterable[str], findings: Findings) -> tuple[str, ...]:
    """The flow-level part of the profile, for every flow into an Event Hubs cluster of
    `props` (in place), and each hub's tier; one line each for `ferry validate`. The client
    part is `profile_client`, on the clients as resolved."""
    shown: list[str] = []
    aliases = list(aliases)
    for alias in [a for a in aliases if is_hub(props, a)]:
        tier = _tier(props, alias, findings)
        shown.append(f"{alias}: Azure Event Hubs ({tier} tier: at most "
                     f"{PARTITION_LIMITS[tier]} partitions per topic; {alias}.{TIER_KEY})")
        for source in aliases:
            if source != alias:
                lines = _flow(props, f"{source}->{alias}")
                # A pair the config does not enable (MM2's heartbeat-only pairs) gets the
                # same settings, but validate shows the flows the config declares
                if _enabled(props, f"{source}->{alias}"):
                    shown += lines
    return tuple(shown)


def _enabled(props: Props, flow: str) -> bool:
    """Whether the config enables `flow` (`S->T.enabled = true`, as MM2 reads it)."""
    value = props.get(f"{flow}.enabled")
    return value is not None and value.text.strip().lower() == "true"


def profile_client(client: ClientConfig, findings: Findings) -> tuple[ClientConfig, list[str]]:
    """A client of an Event Hubs cluster, as the config resolved it, with the profile's
    defaults where the config set nothing, and what the service cannot take refused."""
    settings = dict(client.settings)
    alias, role = client.cluster, client.role
    shown = []
    for key, (value, roles) in CLIENT_DEFAULTS.items():
        if role not in roles:
            continue
        if key in settings:
            shown.append(f"{alias} {role}: {key}={settings[key]} as the config sets it "
                         f"(profile: {value})")
        else:
            settings[key] = value
            shown.append(f"{alias} {role}: {key}={value} (Event Hubs profile)")
    if role == "producer":
        for key in ("compression.type", "compression.codec"):
            given = str(settings.get(key, "none")).strip().lower()
            if given not in COMPRESSIONS:
                findings.problem(f"{alias}.producer.{key}",
                                 "Event Hubs takes gzip as its only compression",
                                 f"set {alias}.producer.compression.type=gzip (or none)", given)
        size = str(settings.get("message.max.bytes", "")).strip()
        if size.isdigit() and int(size) > MAX_REQUEST_SIZE:
            findings.problem(f"{alias}.producer.max.request.size",
                             f"Event Hubs takes requests of at most {MAX_REQUEST_SIZE:,} bytes",
                             f"set {alias}.producer.max.request.size={MAX_REQUEST_SIZE}", size)
    return ClientConfig(client.cluster, client.role, settings, client.retry_seconds), shown


def _tier(props: Props, alias: str, findings: Findings) -> str:
    value = props.get(f"{alias}.{TIER_KEY}")
    tier = value.text.strip().lower() if value else "standard"
    if tier not in PARTITION_LIMITS:
        findings.problem(f"{alias}.{TIER_KEY}", f"must be one of {', '.join(PARTITION_LIMITS)}",
                         f"set {alias}.{TIER_KEY}=premium (the namespace's tier)",
                         value.text if value else None)
        return "standard"
    return tier


def partition_limit(props: Props, alias: str) -> int | None:
    """The partitions per topic the cluster takes: its tier's limit for an Event Hubs
    namespace, None for anything else."""
    if not is_hub(props, alias):
        return None
    value = props.get(f"{alias}.{TIER_KEY}")
    return PARTITION_LIMITS.get(value.text.strip().lower() if value else "standard", 32)


def _flow(props: Props, flow: str) -> list[str]:
    shown = []
    for key, (value, why) in FLOW_DEFAULTS.items():
        given = props.get(f"{flow}.{key}") or props.get(key)
        if given is not None:
            shown.append(f"{flow}: {key}={given.text} as the config sets it ({why})")
        else:
            props[f"{flow}.{key}"] = Value(value, f"{flow}.{key}")
            shown.append(f"{flow}: {key}={value} (Event Hubs profile: {why})")
    return shown

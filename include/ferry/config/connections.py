"""A cluster's client settings from an Airflow connection: `<alias>.ferry.connection =
CONN_ID`, an alternative to writing them (or `${file:...}` references) in the config.

Airflow users keep credentials in Connections and secrets backends (Vault, AWS, GCP). A
connection of the Kafka provider's type (`kafka`) holds a librdkafka client config in its
extra (`{"bootstrap.servers": ..., "security.protocol": ..., "sasl.username": ...}`). Any
other type fits as far as it can: its host (and port) is the bootstrap list, its login and
password the SASL username and password, and its extra keys are client settings too.

The settings join the config as the cluster's: a key MM2's config also knows
(`bootstrap.servers`, `security.protocol`, `sasl.mechanism`, `ssl.truststore.*`, ...) as
that key, so it is checked and translated like one written in the config; a SASL username
and password, for PLAIN or SCRAM, as the `sasl.jaas.config` MM2 would need; any other key as
a librdkafka setting (`<alias>.ferry.librdkafka.<key>`). A setting written in the config
wins over the connection's (a top-level client key too, as MM2 reads it). A value is
secret by its key (`sasl.password`, `sasl.jaas.config`, `ssl.key.password`, tokens, ...),
as if written in the config, so it is masked in `ferry validate` and in every log.

Where connections come from is the caller's, handed to `load_config` as a `Lookup`: the
Airflow adapter hands Airflow's own (environment, secrets backends, metadata DB), a copy job
its snapshot's (`snapshot_lookup`); `AIRFLOW_CONN_<CONN_ID>` in the environment is read
after it (Airflow's JSON or URI form), and only that without one, which is what the CLI
sees outside Airflow. This module stays free of Airflow.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ferry.config.clients import PASSTHROUGH_PREFIX, is_translated, refusal
from ferry.config.findings import Findings
from ferry.config.names import is_client_key
from ferry.config.values import Props, Value

CONNECTION_KEY = "ferry.connection"
"""The cluster key (`<alias>.ferry.connection`) naming an Airflow connection."""

# Settings a connection may carry that are not a cluster's: the Kafka provider's consumer
# group, which Ferry names itself (positions, checkpoints), would otherwise be an error.
_NOT_CLUSTER = {"group.id": "Ferry names its own consumer groups"}


@dataclass(frozen=True)
class Connection:
    """The fields of an Airflow connection Ferry reads."""

    conn_id: str
    conn_type: str = ""
    host: str = ""
    port: int | None = None
    login: str = ""
    password: str = field(default="", repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)


Lookup = Callable[[str], Connection | None]
"""conn_id -> the connection, None when there is none; raises ValueError for one that
cannot be read (its message names where it came from, never a secret)."""

def env_var(conn_id: str) -> str:
    """Airflow's environment variable for a connection."""
    return "AIRFLOW_CONN_" + conn_id.upper()


def from_environment(conn_id: str, env: Mapping[str, str]) -> Connection | None:
    """The connection in `AIRFLOW_CONN_<CONN_ID>`: Airflow's JSON form or its URI form
    (`type://login:password@host:port/?key=value`, or `?__extra__=<json>`)."""
    text = env.get(env_var(conn_id), "").strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{env_var(conn_id)} is not valid JSON (at character "
                             f"{exc.pos})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{env_var(conn_id)} must be a JSON object")
        given = data.get("extra") or {}
        if isinstance(given, str):
            try:
                given = json.loads(given)
            except json.JSONDecodeError:
                raise ValueError(f"{env_var(conn_id)}: its extra is not a JSON object") \
                    from None
        port = data.get("port")
        return Connection(conn_id, str(data.get("conn_type") or ""),
                          str(data.get("host") or ""), int(port) if port else None,
                          str(data.get("login") or ""), str(data.get("password") or ""),
                          _object(given, conn_id))
    if "://" not in text:
        raise ValueError(f"{env_var(conn_id)} is neither Airflow's JSON form ({{...}}) nor "
                         "its URI form (type://login:password@host:port/?key=value)")
    parts = urlsplit(text)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra_json = query.pop("__extra__", None)
    extra: Any = query
    if extra_json is not None:
        try:
            extra = json.loads(extra_json)
        except json.JSONDecodeError:
            raise ValueError(f"{env_var(conn_id)}: its __extra__ is not JSON") from None
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{env_var(conn_id)}: its port is not a number") from None
    return Connection(conn_id, parts.scheme.replace("-", "_"), unquote(parts.hostname or ""),
                      port, unquote(parts.username or ""), unquote(parts.password or ""),
                      _object(extra, conn_id))


def _object(extra: Any, conn_id: str) -> Mapping[str, Any]:
    if not isinstance(extra, dict):
        raise ValueError(f"connection {conn_id!r}: its extra must be a JSON object of "
                         "client settings")
    return extra


def client_settings(conn: Connection) -> tuple[dict[str, str], list[str]]:
    """The client settings a connection gives, and what of it Ferry leaves aside (with
    why). Extra values become text as Kafka's properties hold them (`true`, `5000`)."""
    settings: dict[str, str] = {}
    skipped: list[str] = []
    for key, value in conn.extra.items():
        if key in _NOT_CLUSTER:
            skipped.append(f"{key} ({_NOT_CLUSTER[key]})")
        elif isinstance(value, dict | list):
            raise ValueError(f"connection {conn.conn_id!r}: extra {key!r} must be a single "
                             "value, as a client setting is")
        elif value is not None:
            settings[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    if conn.host and "bootstrap.servers" not in settings:
        hosts = [h.strip() for h in conn.host.split(",") if h.strip()]
        settings["bootstrap.servers"] = ",".join(
            h if conn.port is None or re.search(r":\d+$", h) else f"{h}:{conn.port}"
            for h in hosts)
    if conn.login and "sasl.username" not in settings:
        settings["sasl.username"] = conn.login
    if conn.password and "sasl.password" not in settings:
        settings["sasl.password"] = conn.password
    return settings, skipped


_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def placed(settings: Mapping[str, str], mechanism: str = "") -> dict[str, str]:
    """librdkafka-style `settings` as a cluster's config keys (module docstring): MM2's
    cluster client keys that Ferry translates as themselves, anything else as librdkafka
    pass-through; `mechanism`: the SASL mechanism the config itself sets, if any (it
    wins)."""
    rest = dict(settings)
    if "sasl.mechanisms" in rest:  # librdkafka's older name
        rest.setdefault("sasl.mechanism", rest.pop("sasl.mechanisms"))
    mechanism = (mechanism or rest.get("sasl.mechanism", "")).upper()  # the config wins
    result: dict[str, str] = {}
    module = _LOGIN_MODULES.get(mechanism)
    if module and "sasl.username" in rest and "sasl.password" in rest:
        def quoted(text: str) -> str:
            return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

        result["sasl.jaas.config"] = (f"{module} required username="
                                      f"{quoted(rest.pop('sasl.username'))} password="
                                      f"{quoted(rest.pop('sasl.password'))};")
    for key, text in rest.items():
        cluster_level = is_client_key(key) and is_translated(key)
        result[key if cluster_level else PASSTHROUGH_PREFIX + key] = text
    return result


def expand(props: Props, aliases: list[str], findings: Findings, env: Mapping[str, str],
           lookup: Lookup | None = None) -> dict[str, Connection]:
    """Add the settings of each cluster's `<alias>.ferry.connection` to `props`, under the
    cluster's prefix, where the config does not set them itself; the connections used.
    Each is looked up with `lookup` (Airflow's, a copy job's snapshot's), then in `env`'s
    `AIRFLOW_CONN_<CONN_ID>`; without `lookup`, in `env` only."""
    used: dict[str, Connection] = {}
    for alias in aliases:
        key = f"{alias}.{CONNECTION_KEY}"
        named = props.get(key)
        if named is None:
            continue
        conn_id = named.text.strip()
        try:
            conn = lookup(conn_id) if lookup is not None else None
            if conn is None:
                conn = from_environment(conn_id, env)
            if conn is None:
                where = env_var(conn_id) + (", or Airflow's connections" if lookup else "")
                findings.problem(key, f"no Airflow connection {conn_id!r} (looked in {where})",
                                 "create the connection, or write the cluster's client "
                                 "settings in the config", conn_id)
                continue
            settings, skipped = client_settings(conn)
        except ValueError as exc:
            findings.problem(key, str(exc), "fix the connection", conn_id)
            continue
        except Exception as exc:  # a secrets backend's own error: its kind, never its text
            findings.problem(key, f"looking up Airflow connection {conn_id!r} failed "
                             f"({type(exc).__name__})", "check Airflow's secrets backend",
                             conn_id)
            continue
        used[conn_id] = conn
        for name in skipped:
            findings.warn(f"{key}: connection {conn_id!r} sets {name}: not used")
        for name in settings:
            why = refusal(name)
            if why:
                findings.problem(key, f"connection {conn_id!r} sets {name}: {why}",
                                 f"remove {name} from the connection's extra", conn_id)
        # The config wins: over the cluster's key, and over a top-level client key, which
        # MM2 takes for every cluster that does not set its own.
        mechanism = props.get(f"{alias}.sasl.mechanism") or props.get("sasl.mechanism")
        for name, text in placed({k: v for k, v in settings.items() if not refusal(k)},
                                 mechanism.text if mechanism else "").items():
            where = f"{alias}.{name}"
            if where not in props and not (is_client_key(name) and name in props):
                # Secret by its key (passwords, JAAS lines, keys, tokens), as if written
                # in the config: a login or a linger.ms is not one.
                props[where] = Value.of(where, text)
    return used


SNAPSHOT_SUFFIX = ".connections.json"
_SNAPSHOT_MAX_AGE_S = 86400


def snapshot_path(plan_path: str) -> Path:
    """Where the snapshot of a copy job's connections lies: beside its plan file."""
    return Path(plan_path + SNAPSHOT_SUFFIX)


def write_snapshot(plan_path: str, connections: Mapping[str, Connection]) -> Path | None:
    """Write `connections` for the copy job of `plan_path`, readable by this user only
    (created 0600, then renamed into place); None when there are none. The job's lanes read
    the config again in Spark's workers, where Airflow's connections are out of reach, and
    secrets never travel in Spark closures. Snapshots over a day old in the same folder
    (left by jobs that never started, or were killed) are removed; a cycle's record step
    sweeps its flow's folders too (`ferry.steps.cycle.prune_plans`)."""
    if not connections:
        return None
    path = snapshot_path(plan_path)
    remove_stale_snapshots(path.parent)
    data = {conn_id: {"conn_type": c.conn_type, "host": c.host, "port": c.port,
                      "login": c.login, "password": c.password, "extra": dict(c.extra)}
            for conn_id, c in connections.items()}
    # mkstemp: a new file of this user's only (0600, O_EXCL), never one planted in advance
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out)
    os.replace(partial, path)
    return path


def remove_stale_snapshots(folder: Path, max_age_s: float = _SNAPSHOT_MAX_AGE_S) -> None:
    """Remove the snapshots in `folder` (not below it) older than `max_age_s`."""
    now = time.time()
    for old in folder.glob("*" + SNAPSHOT_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            if now - old.stat().st_mtime > max_age_s:
                old.unlink()


def remove_snapshot(plan_path: str) -> None:
    """Remove the snapshot of `plan_path`'s job, if any (its job ended)."""
    with contextlib.suppress(FileNotFoundError):
        snapshot_path(plan_path).unlink()


def snapshot_lookup(plan_path: str) -> Lookup | None:
    """The connections of `plan_path`'s snapshot, for the copy job's `load_config`; None
    when it has none (the job then reads the environment, as outside Airflow)."""
    try:
        data = json.loads(snapshot_path(plan_path).read_text())
    except FileNotFoundError:
        return None
    return lambda conn_id: Connection(conn_id, **data[conn_id]) if conn_id in data else None

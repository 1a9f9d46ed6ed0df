"""Ferry's configuration: MirrorMaker 2 `mm2.properties`, a Strimzi `KafkaMirrorMaker2`, or a
MirrorMaker 1 setup (a Strimzi `KafkaMirrorMaker`, or MM1's command line: `ferry.config.mm1`).

`load_config(path)` is the one entry point: it reads the file, resolves `${file:...}`,
`${env:...}` and `${dir:...}` variables, applies MM2's precedence and defaults, translates
Java client settings to librdkafka, validates everything and raises `ConfigError` listing
every problem at once.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ferry.config.ferry_keys import KEYS as FERRY_KEYS
from ferry.config.ferry_keys import FerrySettings
from ferry.config.mm1 import Translation
from ferry.config.mm2 import build_config
from ferry.config.model import Cluster, Config, Flow, Interval
from ferry.config.properties import parse_properties
from ferry.errors import ConfigError, Problem

if TYPE_CHECKING:
    from ferry.config.connections import Lookup

CONFIG_ENV = "FERRY_CONFIG"
"""The environment variable naming the config, for the DAGs, the Ferry page and the CLI."""

__all__ = [
    "CONFIG_ENV",
    "FERRY_KEYS",
    "Cluster",
    "Config",
    "ConfigError",
    "FerrySettings",
    "Flow",
    "Interval",
    "cluster_aliases",
    "load_config",
]


def load_config(path: str | Path, env: Mapping[str, str] | None = None, *,
                connections: bool | Collection[str] = True,
                flow: str | None = None, connection_lookup: Lookup | None = None) -> Config:
    """Load and validate a config file; `env` replaces os.environ for `${env:...}`. Without
    `connections`, clusters' `ferry.connection`s are not looked up (a DAG file's parse: no
    call to a secrets backend), so those clusters have no client settings; with a collection
    of aliases, only those clusters' are. With `flow` (`A->B`, or its DAG id), only that
    flow and its reverse are built (`build_config`), and with `connections` only the
    connections of that flow's two clusters are looked up: what one flow's cycle, tasks and
    copy job need, so another cluster's missing connection fails only its own flows.
    `connection_lookup`: where `ferry.connection`s are looked up before the environment's
    `AIRFLOW_CONN_<CONN_ID>` (Airflow's, a copy job's snapshot); None: the environment only.
    KeyError when the config has no such flow."""
    raw, translation, origins = _raw_properties(path, env)
    base = Path(path).resolve().parent
    try:
        config = build_config(raw, str(path), base, env, translation,
                              connections=connections, flow=flow,
                              connection_lookup=connection_lookup)
        if flow is not None:
            config.flow(flow)  # KeyError naming the flows there are, as documented
        return config
    except ConfigError as exc:
        if not origins:
            raise
        from ferry.config.strimzi import yaml_terms

        raise yaml_terms(exc, origins) from None


def cluster_aliases(path: str | Path) -> tuple[str, ...]:
    """The aliases a config names in `clusters`, nothing else read or resolved: `ferry
    local up` starts the clusters that the config's bootstrap servers will point at, so
    those may not resolve yet (e.g. `${file:bootstrap.properties:...}`)."""
    from ferry.mm2.filters import split_list

    aliases = tuple(split_list(_raw_properties(path, None)[0].get("clusters", "")))
    if not aliases:
        raise ConfigError([Problem("clusters", "is missing", "add clusters=source, target")],
                          str(path))
    return aliases


def _raw_properties(path: str | Path, env: Mapping[str, str] | None
                    ) -> tuple[dict[str, str], Translation | None, dict[str, str]]:
    """The file's properties as written (a Strimzi resource or an MM1 command line
    translated to MM2's keys), for an MM1 setup what each of its settings became, and for
    a Strimzi resource the YAML path of each property it set."""
    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ConfigError([Problem(str(path), f"cannot read the config: "
                                   f"{exc.strerror or exc}", "check the path")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")  # what java.util.Properties reads
    base_dir = file.resolve().parent
    if _is_strimzi(file, text):
        from ferry.config.strimzi import strimzi_properties

        return strimzi_properties(text, str(path), base_dir,
                                  dict(os.environ) if env is None else env)
    if _is_mm1_command_line(text):
        from ferry.config.findings import Findings
        from ferry.config.mm1 import command_line

        findings = Findings()
        raw, translation = command_line(text, str(path), base_dir, findings)
        findings.raise_problems(str(path))
        return raw, translation, {}
    return parse_properties(text), None, {}


def _is_mm1_command_line(text: str) -> bool:
    """A line, not a comment, passing MM1's `--consumer.config` (properties never do)."""
    return any("--consumer.config" in line and not line.lstrip().startswith(("#", "!"))
               for line in text.splitlines())


def _is_strimzi(file: Path, text: str) -> bool:
    if file.suffix.lower() in (".yaml", ".yml"):
        return True
    head = text.lstrip()
    return head.startswith(("apiVersion:", "kind:", "---"))

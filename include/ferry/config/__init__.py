"""Ferry's configuration: MirrorMaker 2 `mm2.properties` or a Strimzi `KafkaMirrorMaker2`.

`load_config(path)` is the one entry point: it reads the file, resolves `${file:...}`,
`${env:...}` and `${dir:...}` variables, applies MM2's precedence and defaults, translates
Java client settings to librdkafka, validates everything and raises `ConfigError` listing
every problem at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ferry.config.ferry_keys import KEYS as FERRY_KEYS
from ferry.config.ferry_keys import FerrySettings
from ferry.config.mm2 import build_config
from ferry.config.model import Cluster, Flow, Interval, MirrorConfig
from ferry.config.properties import parse_properties
from ferry.errors import ConfigError, Problem

__all__ = [
    "FERRY_KEYS",
    "Cluster",
    "ConfigError",
    "FerrySettings",
    "Flow",
    "Interval",
    "MirrorConfig",
    "cluster_aliases",
    "load_config",
]


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> MirrorConfig:
    """Load and validate a config file; `env` replaces os.environ for `${env:...}`."""
    raw = _raw_properties(path, env)
    return build_config(raw, str(path), Path(path).resolve().parent, env)


def cluster_aliases(path: str | Path) -> tuple[str, ...]:
    """The aliases a config names in `clusters`, nothing else read or resolved: `ferry
    local up` starts the clusters that the config's bootstrap servers will point at, so
    those may not resolve yet (e.g. `${file:bootstrap.properties:...}`)."""
    from ferry.mm2.filters import split_list

    aliases = tuple(split_list(_raw_properties(path, None).get("clusters", "")))
    if not aliases:
        raise ConfigError([Problem("clusters", "is missing", "add clusters=source, target")],
                          str(path))
    return aliases


def _raw_properties(path: str | Path, env: Mapping[str, str] | None) -> dict[str, str]:
    """The file's properties as written (a Strimzi resource translated to MM2's keys)."""
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

        raw = strimzi_properties(text, str(path), base_dir,
                                 dict(os.environ) if env is None else env)
    else:
        raw = parse_properties(text)
    return raw


def _is_strimzi(file: Path, text: str) -> bool:
    if file.suffix.lower() in (".yaml", ".yml"):
        return True
    head = text.lstrip()
    return head.startswith(("apiVersion:", "kind:", "---"))

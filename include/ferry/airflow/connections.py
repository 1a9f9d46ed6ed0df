"""Airflow connections for `<alias>.ferry.connection`: looked up through Airflow's own
order (environment variables, secrets backends such as Vault or AWS/GCP Secrets Manager,
the metadata DB), so a cluster's credentials can live where the team keeps its others."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ferry.config import Config, load_config
from ferry.config.connections import Connection


def lookup(conn_id: str) -> Connection | None:
    """The Airflow connection `conn_id`, None when Airflow has none by that id."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        found = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    import json

    # Not extra_dejson: it logs a broken extra and gives {}, which would drop the settings.
    try:
        extra = json.loads(found.extra) if found.extra else {}
    except json.JSONDecodeError:
        raise ValueError(f"connection {conn_id!r}: its extra is not JSON") from None
    if not isinstance(extra, dict):
        raise ValueError(f"connection {conn_id!r}: its extra must be a JSON object of client "
                         "settings")
    return Connection(conn_id, str(found.conn_type or ""), str(found.host or ""),
                      int(found.port) if found.port else None, str(found.login or ""),
                      str(found.password or ""), extra)


def load(path: str | Path, connections: bool | Collection[str] = True,
         flow: str | None = None) -> Config:
    """The config at `path`, its clusters' `ferry.connection`s looked up in Airflow (not
    at all without `connections`; with `flow`, those of its two clusters only: see
    `load_config`)."""
    return load_config(path, connections=connections, flow=flow, connection_lookup=lookup)

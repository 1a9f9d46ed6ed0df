"""SQLite connection settings of the scheduler tests' Airflow (imported by its processes
through `[database] sql_alchemy_connect_args`): the api-server, the scheduler and the
running tasks write one SQLite file at once, and a writer waits up to a minute for the
lock instead of SQLite's 5 s default, after which the api-server answers HTTP 500."""

from __future__ import annotations

from typing import Any

CONNECT_ARGS: dict[str, Any] = {"timeout": 60}
ASYNC_CONNECT_ARGS: dict[str, Any] = {"timeout": 60}

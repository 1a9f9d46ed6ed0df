"""SQLite connection settings of the scheduler tests' Airflow, imported by its processes
through `[database] sql_alchemy_connect_args` (and `_async`).

The scheduler, the dag-processor and the api-server write one SQLite file, and SQLite has
one write lock for the whole file. A writer in its own process may wait long for it
(`CONNECT_ARGS`: a minute, not SQLite's 5 s): it stalls only itself.

The api-server must not wait long (`API_SERVER_CONNECT_ARGS`). Its audit log
(`action_logging`, on every REST call that changes something, such as a trigger) commits
synchronously inside an async dependency, on the server's event loop. A task's
execution-API call (`ti_run`, made when a task starts) takes the write lock in a worker
thread and commits only when its session dependency closes, which the event loop schedules.
So when an audited call arrives while a task is starting, the loop waits for a lock that
only the loop can release: the whole server stalls for the full wait. With a minute, the
trigger failed with HTTP 500 after 60 s, and the starting task's supervisor, whose calls
time out after 5 s (`[workers] execution_api_timeout`), asked `ti_run` again, was refused
(the first call had gone through meanwhile) and failed the task before it ran. With 2 s
the stall ends well inside a task's 5 s; the audited call fails with HTTP 500 "Database
error", having written nothing, and the caller asks again (`stack.Airflow`)."""

from __future__ import annotations

from typing import Any

CONNECT_ARGS: dict[str, Any] = {"timeout": 60}
ASYNC_CONNECT_ARGS: dict[str, Any] = {"timeout": 60}
API_SERVER_CONNECT_ARGS: dict[str, Any] = {"timeout": 2}
ASYNC_API_SERVER_CONNECT_ARGS: dict[str, Any] = {"timeout": 2}

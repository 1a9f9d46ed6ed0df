"""The Airflow 3 plugin: the "Ferry" page, its JSON API and the Prometheus endpoint
(adapter). Airflow finds `FerryPlugin` through the package's `airflow.plugins` entry point
(and the provider's `plugins`): no file in Airflow's plugins folder.

Airflow serves a plugin's FastAPI app without any login, so every route here checks the
caller itself, the way Airflow's own API does: the JWT in `Authorization: Bearer <jwt>` or,
without that header, in the `_token` cookie the Airflow UI keeps, validated by the
configured auth manager; the user must also be allowed to read DAGs (the flows are DAGs).
`/metrics` also accepts the scrape token `$FERRY_METRICS_TOKEN` as `Authorization: Bearer
<token>`. Refused: the page redirects to Airflow's login; the API and metrics answer 401
(no or invalid credentials) or 403 (a user without the right).

Routes under `/ferry`: `/` the page, `/runbook` Ferry's runbook (each alert rule's
`runbook_url`), `/api/flows` the page's data as JSON, `/metrics` Prometheus.
The config is `$FERRY_CONFIG`, as for the DAGs, read again on every request.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.concurrency import run_in_threadpool

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Collection

    from ferry.observe.collector import Collector
    from ferry.observe.metrics import Family
    from ferry.observe.snapshot import FlowSnapshot

log = logging.getLogger("ferry.airflow.plugin")

URL_PREFIX = "/ferry"


class Refused(Exception):
    """The request may not see Ferry's data: `status` 401 (who are you?) or 403 (not you)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _credential(request: Request) -> str | None:
    """The caller's JWT: an explicit `Authorization: Bearer` wins over the UI's cookie
    (Airflow's own precedence)."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        return given.strip()
    return request.cookies.get(COOKIE_NAME_JWT_TOKEN) or None


async def airflow_user(request: Request) -> Any:
    """The authenticated Airflow user allowed to read DAGs; `Refused` otherwise. Fails
    closed when Airflow's auth manager is not initialized."""
    from airflow.api_fastapi.app import get_auth_manager
    from jwt import InvalidTokenError

    token = _credential(request)
    if token is None:
        raise Refused(401, "Not authenticated: log in to Airflow, or send "
                           "Authorization: Bearer <token>")
    try:
        manager = get_auth_manager()
    except RuntimeError:
        raise Refused(503, "Airflow's auth manager is not initialized") from None
    try:
        user = await manager.get_user_from_token(token)
    except InvalidTokenError:  # expired, revoked, forged: the same answer
        raise Refused(401, "Invalid or expired token: log in to Airflow again") from None
    if not manager.is_authorized_dag(method="GET", user=user):
        raise Refused(403, "Forbidden: Ferry's page needs the right to read DAGs")
    return user


def _config() -> tuple[str, Any, Any]:
    """(config path, the config without its connections, a resolver that looks up those
    of the clusters it is given); raises ConfigError when the file itself is broken. A flow
    whose connection is missing shows its error, and the other flows still show
    (`observe.collect`)."""
    from ferry.airflow.tasks import config_path

    path = config_path()
    return (path, *_config_at(path))


def _config_at(path: str) -> tuple[Any, Any]:
    """`_config` of the config at `path`."""
    from ferry.airflow.connections import load

    return load(path, connections=False), \
        lambda aliases: load(path, connections=tuple(aliases))


def _snapshots() -> tuple[str, list[FlowSnapshot]]:
    from ferry.observe.collect import collect

    path, config, resolve = _config()
    return path, collect(config, resolve=resolve)


def _families(path: str) -> list[Family]:
    """One collection of the metrics of the config at `path`."""
    from ferry.observe.collect import metric_families

    return metric_families(*_config_at(path))


def _silent(path: str) -> Collection[str]:
    """The clusters of the config at `path` that do not answer now, their connections looked
    up as a collection looks them up; none when they cannot be looked up (the collection
    says why)."""
    from ferry.errors import FerryError
    from ferry.observe.collect import silent_clusters

    config, resolve = _config_at(path)
    aliases = {alias for f in config.enabled_flows for alias in (f.source, f.target)}
    try:
        return silent_clusters(resolve(aliases))
    except FerryError:
        return set()


class Collectors:
    """The background collectors of one app's metrics, one per config path (the config is
    `$FERRY_CONFIG`, read again at each scrape), each started on its config's first scrape:
    a scrape serves the latest collection at once, whatever the clusters do. The app built
    by `create_app` holds one, hands it to its `/metrics` route and closes it at the end of
    its lifespan; two apps share no collector. `collect`: one collection of a config's
    metrics; `silent`: the clusters of a config that do not answer now, asked while a
    collection hangs (`ferry.observe.collector`; by default with the default `collect`);
    `interval_s`: the pause between collections."""

    def __init__(self, collect: Callable[[str], list[Family]] = _families,
                 silent: Callable[[str], Collection[str]] | None = None,
                 interval_s: float | None = None) -> None:
        self._collect = collect
        self._silent = silent if silent is not None else (
            _silent if collect is _families else None)
        self._interval_s = interval_s
        self._by_path: dict[str, Collector] = {}
        self._lock = threading.Lock()

    def of(self, path: str) -> Collector:
        """The collector of the config at `path`, started on the first call."""
        from ferry.observe.collector import REFRESH_SECONDS, Collector

        silent = self._silent
        with self._lock:
            found = self._by_path.get(path)
            if found is None:
                found = self._by_path[path] = Collector(
                    lambda: self._collect(path), self._interval_s or REFRESH_SECONDS,
                    silent=(lambda: silent(path)) if silent is not None else None).start()
        return found

    def close(self) -> None:
        """Stop every collector and forget it (the app's end; a scrape after that, of an
        app served again, starts a new one)."""
        with self._lock:
            found, self._by_path = list(self._by_path.values()), {}
        for collector in found:
            collector.stop()


def create_app(collectors: Collectors | None = None) -> FastAPI:
    """The FastAPI app Airflow mounts under `URL_PREFIX`; its metrics come from
    `collectors` (by default its own), closed at the app's end (Airflow runs the lifespan
    of the apps it mounts)."""
    from ferry.errors import ConfigError
    from ferry.observe.metrics import TOKEN_ENV, token_allows

    kept = collectors if collectors is not None else Collectors()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            kept.close()

    app = FastAPI(title="Ferry", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status,
                            headers={"WWW-Authenticate": "Bearer"} if exc.status == 401 else {})

    @app.get("/", response_class=HTMLResponse)
    async def page(request: Request) -> Response:
        login = await _person(request)
        if login is not None:
            return login
        from ferry.airflow.tasks import config_path
        from ferry.observe.page import render_page

        try:
            path, found = await run_in_threadpool(_snapshots)
        except ConfigError as exc:
            return HTMLResponse(render_page([], time.time(), config_path(), str(exc)))
        return HTMLResponse(render_page(found, time.time(), path))

    @app.get("/runbook", response_class=HTMLResponse)
    async def runbook(request: Request) -> Response:
        """Ferry's runbook, one section per alert: where each alert's runbook_url points."""
        login = await _person(request)
        if login is not None:
            return login
        from ferry.observe.runbook import render_runbook

        return HTMLResponse(render_runbook(_base_path() + URL_PREFIX.strip("/") + "/"))

    @app.get("/api/flows")
    async def flows(request: Request) -> Response:
        await airflow_user(request)
        from ferry.observe.snapshot import to_json

        try:
            path, found = await run_in_threadpool(_snapshots)
        except ConfigError as exc:
            return JSONResponse({"error": str(exc)}, status_code=500)
        now = time.time()
        return JSONResponse({"config": path, "flows": [to_json(s, now) for s in found]})

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        token = os.environ.get(TOKEN_ENV, "").strip() or None
        if not token_allows(request.headers.get("authorization"), token):
            await airflow_user(request)
        from ferry.airflow.tasks import config_path
        from ferry.observe.serve import FIRST_WAIT_S

        try:
            found = await run_in_threadpool(kept.of(config_path()).served, FIRST_WAIT_S)
        except ConfigError as exc:
            return PlainTextResponse(f"ferry: {exc}\n", status_code=500)
        from ferry.observe.exposition import expose

        body, kind = expose(found, request.headers.get("accept"))
        return Response(body, media_type=kind)

    return app


async def _person(request: Request) -> Response | None:
    """None for a signed-in user who may read DAGs; a redirect to Airflow's login (and back)
    for a person at a browser who is not signed in. A user without the right is refused."""
    try:
        await airflow_user(request)
    except Refused as exc:
        if exc.status != 401:
            raise
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)),
                                status_code=303)
    return None


def _base_path() -> str:
    """Airflow's `[api] base_url` path ("/" by default): plugin apps are mounted under it."""
    from airflow.configuration import conf

    path = urlsplit(conf.get("api", "base_url", fallback="") or "/").path or "/"
    return path if path.endswith("/") else path + "/"


class FerryPlugin(AirflowPlugin):
    name = "ferry"
    # AirflowPlugin declares these as plain class attributes (hence no ClassVar).
    fastapi_apps: list[Any] = [  # noqa: RUF012
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "Ferry"}]
    external_views: list[Any] = [{  # noqa: RUF012
        "name": "Ferry",
        "href": f"{_base_path()}{URL_PREFIX.strip('/')}/",
        "destination": "nav",
        "url_route": "ferry",
        "category": "browse",
    }]

"""`ferry metrics --serve HOST:PORT`: a Prometheus endpoint for setups without the Airflow
plugin (stdlib HTTP server; the text format or OpenMetrics, by the scrape's `Accept`,
`ferry.observe.exposition`). The clusters and the state tables are read in the background
every `refresh_s` seconds (`ferry.observe.collector`); a scrape answers at once with the
latest collection and its age (`ferry_metrics_collected 0` alone until the first one ends,
within seconds: a cluster that does not answer is probed, not waited for).

With a scrape token configured (`FERRY_METRICS_TOKEN`), a scrape must send
`Authorization: Bearer <token>`; the token is never logged, and neither are headers.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ferry.errors import ConfigError, UsageError
from ferry.observe.collector import REFRESH_SECONDS, Collector

log = logging.getLogger("ferry.metrics")

_LISTEN = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+)):(?P<port>\d{1,5})$")


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a hung scrape does not keep the process alive


class _Server6(_Server):
    address_family = socket.AF_INET6


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9464` for IPv6; port 0: any free one) -> (host, port); a usage
    error otherwise."""
    match = _LISTEN.match(value.strip())
    port = int(match["port"]) if match else 0
    if match is None or not 0 <= port < 65536:
        raise UsageError(f"--serve {value!r}: expected HOST:PORT with a port from 0 (any free "
                         "one) to 65535, e.g. --serve 127.0.0.1:9464")
    return match["v6"] or match["host"], port


FIRST_WAIT_S = 0.5
"""How long a scrape waits for the first collection before it is answered without it."""


def serve(config_file: str, host: str, port: int, token: str | None,
          ready: Callable[[str], None], refresh_s: float = REFRESH_SECONDS) -> None:
    """Serve `/metrics` until interrupted; `ready` gets the URL once the socket listens."""
    from ferry.config import load_config
    from ferry.observe.collect import metric_families, silent_clusters
    from ferry.observe.exposition import expose
    from ferry.observe.metrics import token_allows

    collector = Collector(lambda: metric_families(load_config(config_file)), refresh_s,
                          silent=lambda: silent_clusters(load_config(config_file)))

    class Handler(BaseHTTPRequestHandler):
        server_version = "ferry-metrics"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/":
                self._reply(200, "text/plain; charset=utf-8", "Ferry metrics: /metrics\n")
                return
            if path != "/metrics":
                self._reply(404, "text/plain; charset=utf-8", "not found; try /metrics\n")
                return
            if token and not token_allows(self.headers.get("Authorization"), token):
                self._reply(401, "text/plain; charset=utf-8",
                            "a scrape token is required: Authorization: Bearer <token>\n",
                            {"WWW-Authenticate": 'Bearer realm="ferry-metrics"'})
                return
            try:
                found = collector.served(FIRST_WAIT_S)
            except ConfigError as exc:
                self._reply(500, "text/plain; charset=utf-8", f"ferry: {exc}\n")
                return
            body, kind = expose(found, self.headers.get("Accept"))
            self._reply(200, kind, body)

        def _reply(self, code: int, kind: str, body: str | bytes,
                   headers: dict[str, str] | None = None) -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            # The request line and status only: never headers (the token).
            log.debug("%s %s", self.address_string(), format % args)

    server = (_Server6 if ":" in host else _Server)((host, port), Handler)
    collector.start()
    try:
        shown = f"[{host}]" if ":" in host else host
        ready(f"http://{shown}:{server.server_address[1]}/metrics")
        server.serve_forever()
    finally:
        collector.stop()
        server.server_close()

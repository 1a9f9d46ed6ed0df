"""Toxiproxy between Ferry and the session's clusters: network faults on real sockets.

The session's clusters run behind a proxy each (`cluster.up(..., behind_proxy=True)`): a
client that bootstraps at `ClusterState.proxy_bootstrap` reaches the broker only through
Toxiproxy, every later connection too (the broker advertises the proxy there). The direct
listener (`bootstrap`) is untouched, so a test checks what a faulty link did through a
healthy one, and the other tests never see a fault.

`serve` starts one `toxiproxy-server` (scripts/test-tools.sh builds it) for the session,
with one proxy per cluster named by its alias; `Toxiproxy` is its REST API: toxics
(`latency`, `timeout`: nothing forwarded, the connection held open, `bandwidth`), a proxy
disabled (every connection cut, new ones refused) and `reset` (every proxy enabled,
every toxic removed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.local.layout import ClusterState

STATE = "toxiproxy.json"
"""In the service's folder: the server's pid, API address and proxied bootstraps."""


def binary() -> Path:
    """The server scripts/test-tools.sh built beside the virtualenv's python."""
    import sys

    return Path(sys.executable).parent / "toxiproxy-server"


@dataclass(frozen=True)
class Toxiproxy:
    """The session's Toxiproxy: its API, and each cluster's bootstrap through it."""

    api: str
    bootstrap: Mapping[str, str]
    """Cluster alias -> bootstrap servers through its proxy (named by the alias)."""

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.api}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None

    def add(self, proxy: str, toxic: str, kind: str, stream: str = "downstream",
            **attributes: int) -> None:
        """Add toxic `toxic` of `kind` to `proxy`'s `stream` (downstream: broker to
        client; upstream: client to broker)."""
        self._call("POST", f"/proxies/{proxy}/toxics", {
            "name": toxic, "type": kind, "stream": stream, "toxicity": 1.0,
            "attributes": attributes})

    def remove(self, proxy: str, toxic: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic}")

    def enabled(self, proxy: str, enabled: bool) -> None:
        """Disabled: every open connection is closed and new ones refused."""
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def reset(self) -> None:
        """Every proxy enabled, every toxic removed."""
        self._call("POST", "/reset")

    @contextmanager
    def black_hole(self, proxy: str) -> Iterator[None]:
        """Nothing forwarded either way, every connection held open (a half-open link, a
        firewall dropping packets), new connections too, until the block ends."""
        self.add(proxy, "black-hole-down", "timeout", "downstream", timeout=0)
        self.add(proxy, "black-hole-up", "timeout", "upstream", timeout=0)
        try:
            yield
        finally:
            self.remove(proxy, "black-hole-down")
            self.remove(proxy, "black-hole-up")


    @contextmanager
    def stalled_then_cut(self, proxy: str, latency_ms: int, stalled_s: float
                         ) -> Iterator[None]:
        """Every answer `latency_ms` late for `stalled_s`, then every connection cut and
        new ones refused, until the block ends."""
        self.add(proxy, "stall", "latency", "downstream", latency=latency_ms)
        time.sleep(stalled_s)
        self.enabled(proxy, False)
        self.remove(proxy, "stall")
        try:
            yield
        finally:
            self.enabled(proxy, True)

    @contextmanager
    def slow(self, proxy: str, rate_kb: int) -> Iterator[None]:
        """What clients send through `proxy` limited to `rate_kb` KB/s until the block
        ends."""
        self.add(proxy, "slow", "bandwidth", "upstream", rate=rate_kb)
        try:
            yield
        finally:
            self.remove(proxy, "slow")


def serve(root: Path, states: list[ClusterState]) -> Toxiproxy:
    """The session's Toxiproxy in `root` (started now, or found running), with a proxy per
    cluster of `states` from its `proxy_bootstrap` to its `proxy_upstream`."""
    state_file = root / STATE
    if state_file.exists():
        known = json.loads(state_file.read_text())
        found = Toxiproxy(known["api"], known["bootstrap"])
        if _alive(known["pid"]) and _answers(found):
            return found
    port = _free_port()
    log = open(root / "toxiproxy.log", "ab")  # noqa: SIM115  # the server's, kept open
    server = subprocess.Popen([str(binary()), "-host", "127.0.0.1", "-port", str(port)],
                              stdout=log, stderr=log, start_new_session=True)
    proxy = Toxiproxy(f"http://127.0.0.1:{port}", {
        s.alias: s.proxy_bootstrap for s in states if s.proxy_bootstrap is not None})
    deadline = time.monotonic() + 30
    while not _answers(proxy):
        assert server.poll() is None, f"toxiproxy-server exited: {root / 'toxiproxy.log'}"
        assert time.monotonic() < deadline, "toxiproxy-server did not answer in 30 s"
        time.sleep(0.1)
    for s in states:
        proxy._call("POST", "/proxies", {"name": s.alias, "listen": s.proxy_bootstrap,
                                         "upstream": s.proxy_upstream, "enabled": True})
    state_file.write_text(json.dumps({"pid": server.pid, "api": proxy.api,
                                      "bootstrap": dict(proxy.bootstrap)}))
    return proxy


def stop(root: Path) -> None:
    """Stop the Toxiproxy `serve` started in `root`."""
    state_file = root / STATE
    if not state_file.exists():
        return
    pid = json.loads(state_file.read_text())["pid"]
    if _alive(pid):
        os.killpg(pid, signal.SIGTERM)
    state_file.unlink()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _answers(proxy: Toxiproxy) -> bool:
    try:
        proxy._call("GET", "/version")
    except (OSError, urllib.error.URLError):
        return False
    return True

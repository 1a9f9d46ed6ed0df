"""The embedded warm Spark: one local Spark Connect server, started and stopped by Ferry.

`up` starts `spark/connect.server_command` detached (its own session, output appended to
`server.log`), waits until it accepts connections and records pid, port and URL in
`server.json` under `<dir>` (default `$FERRY_HOME/local/spark`). A server already running
is kept as it is; a restarted one keeps its port while it is free. It listens on loopback
only. Point a flow at it with `ferry.spark.master=sc://127.0.0.1:<port>` (what `up`
prints) or `ferry mirror --master`.

A pid is ours only while `/proc/<pid>/cmdline` names the Connect server class and this
very directory (`is_ours`): `down` signals no other process, and never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ferry.errors import TransientError
from ferry.local.layout import default_dir
from ferry.local.pids import runs_with
from ferry.spark.connect import DEFAULT_PORT, SERVER_CLASS, SERVER_HEAP, server_command
from ferry.spark.submit import submit_env

STATE_FILE = "server.json"
LOG_FILE = "server.log"
READY_TIMEOUT_S = 120.0
HOST = "127.0.0.1"


@dataclass(frozen=True)
class ServerState:
    """What `server.json` records."""

    dir: str
    port: int
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    @property
    def log(self) -> str:
        return str(Path(self.dir) / LOG_FILE)


def server_dir(base: Path | None = None) -> Path:
    """`<base>` or `$FERRY_HOME/local/spark`."""
    return base or default_dir() / "spark"


def load(base: Path | None = None) -> ServerState | None:
    try:
        return ServerState(**json.loads((server_dir(base) / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _save(state: ServerState) -> None:
    path = Path(state.dir) / STATE_FILE
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(asdict(state), indent=2) + "\n")
    partial.replace(path)


def is_ours(state: ServerState) -> bool:
    """True when the recorded pid is alive and is the Connect server of this directory."""
    return runs_with(state.pid, SERVER_CLASS, f"spark.ferry.home={state.dir}")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def up(base: Path | None = None, port: int | None = None, master: str = "local[*]",
       timeout_s: float = READY_TIMEOUT_S, heap: str = SERVER_HEAP) -> ServerState:
    """Start the server with a fixed `heap` (or keep the running one, whatever its heap);
    returns it once it accepts sessions."""
    directory = server_dir(base).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    previous = load(directory)
    if previous is not None and is_ours(previous):
        return previous
    if port is None:
        wanted = previous.port if previous is not None else DEFAULT_PORT
        port = wanted if _port_free(wanted) else _free_port()
    command = server_command(port, master=master, heap=heap)
    command += ["--conf", f"spark.ferry.home={directory}"]
    with open(directory / LOG_FILE, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   cwd=directory, env=submit_env())
    state = ServerState(str(directory), port, process.pid)
    _save(state)
    deadline = time.monotonic() + timeout_s
    while not _accepts(port):
        if process.poll() is not None:
            raise TransientError(f"the Spark Connect server exited with {process.returncode} "
                                 f"before accepting sessions; see {state.log}")
        if time.monotonic() > deadline:
            _stop(process.pid)
            raise TransientError(f"the Spark Connect server did not accept sessions on "
                                 f"{HOST}:{port} within {timeout_s:.0f}s; see {state.log}")
        time.sleep(0.5)
    return state


def status(base: Path | None = None) -> tuple[ServerState | None, bool]:
    """The recorded server (None when never started) and whether it is running."""
    state = load(base)
    return state, state is not None and is_ours(state)


def down(base: Path | None = None) -> ServerState | None:
    """Stop the server when it runs; returns what was recorded."""
    state = load(base)
    if state is None:
        return None
    if is_ours(state) and state.pid is not None:
        _stop(state.pid)
    stopped = ServerState(state.dir, state.port, None)
    _save(stopped)
    return stopped


def _stop(pid: int, grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group (its Python workers too), SIGKILL after grace."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (OSError, IndexError):
        return True

"""The embedded warm Spark: one local Spark Connect server, started and stopped by Ferry.

`up` starts `spark/connect.server_command` detached (its own session, output appended to
`server.log`), waits until that very process listens on its port (another process's
listener is not it: a port taken before the server binds it moves to a free one, or fails
naming the port when it was given) and records pid, port and URL in
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
PORT_ATTEMPTS = 3
"""Ports tried when the chosen one is taken before the server binds it."""
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


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on `port` (any local address), from /proc/net."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                # local_address is ADDRESS:PORT in hex; 0A is TCP_LISTEN
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    found.add(fields[9])
    return found


def _listens(pid: int, port: int) -> bool:
    """True when a process of `pid`'s session (the server and what it started) listens on
    `port`: another process's listener does not count."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not inodes:
        return False
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            # the session id is the 6th field, after the parenthesised command name
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3]) != pid:
                continue
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return True
        except (OSError, IndexError, ValueError):
            continue
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
    chosen = port is None
    if port is None:
        wanted = previous.port if previous is not None else DEFAULT_PORT
        port = wanted if _port_free(wanted) else _free_port()
    for _ in range(PORT_ATTEMPTS):
        state, bound = _start(directory, port, master, heap, timeout_s)
        if bound:
            return state
        if not chosen:
            break
        port = _free_port()  # another process took the port between the check and the bind
    raise TransientError(f"port {port} on {HOST} is in use by another process: give "
                         f"another with --port, or stop what listens there")


def _start(directory: Path, port: int, master: str, heap: str, timeout_s: float
           ) -> tuple[ServerState, bool]:
    """Start the server on `port` and wait until it listens there itself; with False when
    it could not bind the port because another process holds it."""
    command = server_command(port, master=master, heap=heap)
    command += ["--conf", f"spark.ferry.home={directory}"]
    with open(directory / LOG_FILE, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   cwd=directory, env=submit_env())
    state = ServerState(str(directory), port, process.pid)
    _save(state)
    deadline = time.monotonic() + timeout_s
    # Accepting connections is not enough: another process's listener on the port accepts
    # them too, while this server fails to bind it and exits.
    while not _listens(process.pid, port):
        if process.poll() is not None:
            if _listening_inodes(port):  # another process's, this one has exited
                _save(ServerState(str(directory), port, None))
                return state, False
            raise TransientError(f"the Spark Connect server exited with {process.returncode} "
                                 f"before accepting sessions; see {state.log}")
        if time.monotonic() > deadline:
            _stop(process.pid)
            raise TransientError(f"the Spark Connect server did not accept sessions on "
                                 f"{HOST}:{port} within {timeout_s:.0f}s; see {state.log}")
        time.sleep(0.5)
    return state, True


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

"""Start, inspect and stop single-node KRaft clusters on loopback.

Each cluster lives in `<dir>/<alias>/`: `server.properties`, `data/`, `broker.log` and
`cluster.json` (alias, ports, pid). Stopping signals only a pid recorded there, and only
after checking that the process is the broker started from that very directory (never a
broad kill). `<dir>/bootstrap.properties` lists `<alias>.bootstrap.servers=...` for every
cluster, ready for a `${file:...}` reference in an mm2.properties.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ferry.errors import TerminalError, TransientError
from ferry.local.jars import kafka_jars, log4j_config

log = logging.getLogger(__name__)

DEFAULT_ALIASES = ("source", "target")
READY_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class ClusterState:
    """What `cluster.json` records about one local cluster."""

    alias: str
    dir: str
    port: int
    controller_port: int
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def default_dir() -> Path:
    return Path(os.environ.get("FERRY_HOME") or Path.home() / ".ferry") / "local"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _cluster_id() -> str:
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # StorageTool would read it as an option
            return cid


def server_properties(state: ClusterState) -> str:
    """A single-node combined broker+controller config (PLAINTEXT on loopback)."""
    data = Path(state.dir) / "data"
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{state.controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{state.port},"
        f"CONTROLLER://127.0.0.1:{state.controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{state.port}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={data}",
        "num.partitions=1",
        "auto.create.topics.enable=false",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=10",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=10",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        # Development clusters: let the log cleaner look for work every second (tests of
        # compacted topics would otherwise wait 15 s per pass).
        "log.cleaner.backoff.ms=1000",
        "",
    ])


def _load(cluster_dir: Path) -> ClusterState | None:
    try:
        return ClusterState(**json.loads((cluster_dir / "cluster.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _save(state: ClusterState) -> None:
    path = Path(state.dir) / "cluster.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    tmp.replace(path)


def is_our_broker(state: ClusterState) -> bool:
    """True when the recorded pid is alive and is the broker of this very directory."""
    if state.pid is None:
        return False
    try:
        cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    props = str(Path(state.dir) / "server.properties").encode()
    return b"kafka.Kafka" in cmdline and props in cmdline


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise TerminalError("java is not installed: install a JDK >= 17 (Kafka 4 needs it)")
    return java


def _run_java(args: list[str], jars: Path, log_file: Path | None = None,
              detach: bool = False) -> subprocess.Popen[bytes]:
    cmd = [_java(), "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
           f"-Dlog4j2.configurationFile={log4j_config()}", "-cp", f"{jars}/*", *args]
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=detach)
    finally:
        if log_file:
            out.close()  # type: ignore[union-attr]


def _prepare(root: Path, alias: str) -> ClusterState:
    cluster_dir = root / alias
    cluster_dir.mkdir(parents=True, exist_ok=True)
    old = _load(cluster_dir)
    if old and _port_free(old.port) and _port_free(old.controller_port):
        return ClusterState(alias, str(cluster_dir), old.port, old.controller_port)
    return ClusterState(alias, str(cluster_dir), _free_port(), _free_port())


def _start_one(root: Path, alias: str, jars: Path) -> ClusterState:
    cluster_dir = root / alias
    current = _load(cluster_dir)
    if current and is_our_broker(current):
        log.info("cluster %s already running (pid %s)", alias, current.pid)
        return current
    state = _prepare(root, alias)
    props = Path(state.dir) / "server.properties"
    props.write_text(server_properties(state))
    log_file = Path(state.dir) / "broker.log"
    if not (Path(state.dir) / "data" / "meta.properties").exists():
        fmt = _run_java(["kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                         "-c", str(props)], jars, log_file)
        if fmt.wait(timeout=120) != 0:
            raise TerminalError(f"cluster {alias}: formatting storage failed; see {log_file}")
    proc = _run_java(["kafka.Kafka", str(props)], jars, log_file, detach=True)
    state = ClusterState(state.alias, state.dir, state.port, state.controller_port, proc.pid)
    _save(state)
    return state


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def up(aliases: tuple[str, ...] = DEFAULT_ALIASES, root: Path | None = None,
       timeout: float = READY_TIMEOUT_S) -> list[ClusterState]:
    """Start (or keep) one cluster per alias and wait until each accepts produce/consume."""
    from ferry.local.probe import wait_ready

    root = (root or default_dir()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    jars = kafka_jars()
    with ThreadPoolExecutor(max_workers=len(aliases) or 1) as pool:
        states = list(pool.map(lambda a: _start_one(root, a, jars), aliases))
    deadline = time.monotonic() + timeout
    for state in states:
        def alive(s: ClusterState = state) -> bool:
            return is_our_broker(s)

        try:
            wait_ready(state.bootstrap, deadline, alive)
        except TransientError as exc:
            raise TerminalError(f"cluster {state.alias} did not become ready: {exc}; "
                                f"broker.log: {_tail(Path(state.dir) / 'broker.log')}") from None
    _write_bootstrap(root)
    return states


def _write_bootstrap(root: Path) -> None:
    lines = [f"{s.alias}.bootstrap.servers={s.bootstrap}" for s in states_in(root)]
    (root / "bootstrap.properties").write_text("\n".join(lines) + "\n")


def states_in(root: Path | None = None) -> list[ClusterState]:
    root = (root or default_dir()).resolve()
    if not root.is_dir():
        return []
    found = (_load(d) for d in sorted(root.iterdir()) if d.is_dir())
    return [s for s in found if s is not None]


def status(root: Path | None = None) -> list[dict[str, object]]:
    """One entry per cluster: alias, bootstrap, pid, running, answering."""
    from ferry.local.probe import answers

    result: list[dict[str, object]] = []
    for state in states_in(root):
        running = is_our_broker(state)
        result.append({
            "alias": state.alias, "bootstrap": state.bootstrap,
            "pid": state.pid if running else None, "running": running,
            "answering": running and answers(state.bootstrap), "dir": state.dir,
        })
    return result


def down(root: Path | None = None, wipe: bool = False, timeout: float = 30.0) -> list[str]:
    """Stop every cluster `up` started in `root`; returns the aliases stopped."""
    root = (root or default_dir()).resolve()
    stopped: list[str] = []
    states = states_in(root)
    for state in states:
        if is_our_broker(state) and state.pid is not None:
            os.kill(state.pid, signal.SIGTERM)
            stopped.append(state.alias)
    deadline = time.monotonic() + timeout
    for state in states:
        while is_our_broker(state) and time.monotonic() < deadline:
            time.sleep(0.2)
        if is_our_broker(state) and state.pid is not None:
            log.warning("cluster %s did not stop in %.0fs; killing pid %s",
                        state.alias, timeout, state.pid)
            os.kill(state.pid, signal.SIGKILL)
            while is_our_broker(state):
                time.sleep(0.1)
        _save(ClusterState(state.alias, state.dir, state.port, state.controller_port))
    if wipe:
        for state in states:
            shutil.rmtree(state.dir, ignore_errors=True)
        (root / "bootstrap.properties").unlink(missing_ok=True)
    return stopped

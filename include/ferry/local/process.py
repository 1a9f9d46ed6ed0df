"""The local brokers' processes: start (`up`), inspect (`status`) and stop (`down`).

`up` formats a cluster's storage once (with its SCRAM users, for the secure profile), then
starts `kafka.Kafka` detached with `<dir>/<alias>/server.properties`, its output appended to
`broker.log`, and records the pid and ports in `cluster.json`. A restarted cluster keeps its
ports while they are free, so its clients' `bootstrap.servers` stay right; a cluster already
running is kept as it is. A cluster's profile (PLAINTEXT or secure) is fixed by its data:
switching needs a wipe.

A pid is ours only while `/proc/<pid>/cmdline` names `kafka.Kafka` and this very cluster's
`server.properties` (`is_our_broker`): `down` signals no other process, and never by name.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from ferry.errors import TerminalError, TransientError
from ferry.local.broker_config import server_properties
from ferry.local.credentials import (
    CREDENTIALS_FILE,
    admin_client_settings,
    ensure_credentials,
    scram_format_args,
)
from ferry.local.layout import (
    BOOTSTRAP_FILE,
    TLS_DIR,
    ClusterState,
    default_dir,
    load_state,
    save_state,
    states_in,
    write_bootstrap,
)
from ferry.local.pids import runs_with
from ferry.local.tls import TlsFiles, ensure_tls, write_atomic
from ferry.spark.jars import kafka_jars, log4j_config

# The name these lines have always carried (`ferry.local.cluster`, the public face): log
# filters and readers of the lines need not know how the package is split.
log = logging.getLogger("ferry.local.cluster")

DEFAULT_ALIASES = ("source", "target")
READY_TIMEOUT_S = 90.0


def is_our_broker(state: ClusterState) -> bool:
    """True when the recorded pid is alive and is the broker of this very directory."""
    return runs_with(state.pid, "kafka.Kafka", str(Path(state.dir) / "server.properties"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_free(port: int) -> bool:
    """Whether a broker could listen on `port` now. With SO_REUSEADDR, as the broker binds
    (Java's default): connections left in TIME_WAIT by a stopped broker do not keep a
    restarted cluster from its old ports (its clients' bootstrap.servers stay right)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = _free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _prepare(root: Path, alias: str, secure: bool) -> ClusterState:
    """The state of a cluster about to start: its recorded ports while all are still free,
    else new ones (client, controller, and SASL_PLAINTEXT for a secure cluster)."""
    cluster_dir = root / alias
    cluster_dir.mkdir(parents=True, exist_ok=True)
    old = load_state(cluster_dir)
    wanted = 3 if secure else 2
    if old:
        ports = [old.port, old.controller_port]
        if secure and old.sasl_plaintext_port is not None:
            ports.append(old.sasl_plaintext_port)
        if len(ports) != wanted or not all(_port_free(p) for p in ports):
            ports = _free_ports(wanted)
    else:
        ports = _free_ports(wanted)
    return ClusterState(alias, str(cluster_dir), port=ports[0], controller_port=ports[1],
                        secure=secure, sasl_plaintext_port=ports[2] if secure else None)


def _cluster_id() -> str:
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # StorageTool would read it as an option
            return cid


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


def _profile(secure: bool) -> str:
    return "secure (SASL + ACLs)" if secure else "PLAINTEXT"


@dataclass(frozen=True)
class _Security:
    passwords: dict[str, str]
    new_passwords: bool  # credentials.properties was just written
    tls: TlsFiles


def _start_one(root: Path, alias: str, jars: Path,
               security: _Security | None = None,
               extra: Mapping[str, str] | None = None) -> ClusterState:
    secure = security is not None
    cluster_dir = root / alias
    current = load_state(cluster_dir)
    if current and is_our_broker(current):
        if current.secure != secure:
            raise TerminalError(f"cluster {alias} is running {_profile(current.secure)}, not "
                                f"{_profile(secure)}: stop it first (ferry local down)")
        if security is not None and security.new_passwords:
            raise TerminalError(f"cluster {alias} is running, but {root / CREDENTIALS_FILE} "
                                "was missing: stop and wipe it (ferry local down --wipe)")
        log.info("cluster %s already running (pid %s)", alias, current.pid)
        return current
    formatted = (cluster_dir / "data" / "meta.properties").exists()
    was_secure = current.secure if current else False
    if formatted and was_secure != secure:
        raise TerminalError(f"cluster {alias} in {cluster_dir} holds {_profile(was_secure)} "
                            f"data, not {_profile(secure)}: wipe it first "
                            "(ferry local down --wipe)")
    if formatted and security is not None and security.new_passwords:
        raise TerminalError(f"cluster {alias}: {root / CREDENTIALS_FILE} was missing, so its "
                            "SCRAM users have passwords no longer known: wipe it first "
                            "(ferry local down --wipe)")
    state = _prepare(root, alias, secure)
    props = Path(state.dir) / "server.properties"
    text = server_properties(state, security.passwords if security else None,
                             security.tls if security else None, extra)
    write_atomic(props, text.encode(), 0o600 if secure else 0o644)  # JAAS holds passwords
    log_file = Path(state.dir) / "broker.log"
    if not formatted:
        scram = scram_format_args(security.passwords) if security else []
        fmt = _run_java(["kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                         "-c", str(props), *scram], jars, log_file)
        if fmt.wait(timeout=120) != 0:
            raise TerminalError(f"cluster {alias}: formatting storage failed; see {log_file}")
    proc = _run_java(["kafka.Kafka", str(props)], jars, log_file, detach=True)
    state = replace(state, pid=proc.pid)
    save_state(state)
    return state


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def up(aliases: tuple[str, ...] = DEFAULT_ALIASES, root: Path | None = None,
       secure: bool = False, timeout: float = READY_TIMEOUT_S,
       extra: Mapping[str, str] | None = None, wait: bool = True) -> list[ClusterState]:
    """Start (or keep) one cluster per alias and wait until each accepts produce/consume
    (as the super user over SASL_SSL for `secure` clusters; see `ferry.local.cluster`).
    `extra`: broker settings added to every new or restarted cluster's properties.
    Without `wait`, return as soon as the brokers are started: nothing has used them yet
    (tests of what a first client meets, e.g. a group coordinator never loaded)."""
    from ferry.local.probe import wait_ready

    root = (root or default_dir()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    jars = kafka_jars()
    security = None
    if secure:
        passwords, new = ensure_credentials(root)
        security = _Security(passwords, new, ensure_tls(root / TLS_DIR))
    with ThreadPoolExecutor(max_workers=len(aliases) or 1) as pool:
        states = list(pool.map(lambda a: _start_one(root, a, jars, security, extra), aliases))
    if not wait:
        write_bootstrap(root)
        return states
    deadline = time.monotonic() + timeout
    for state in states:
        def alive(s: ClusterState = state) -> bool:
            return is_our_broker(s)

        try:
            wait_ready(state.bootstrap, deadline, alive, admin_client_settings(state))
        except TransientError as exc:
            raise TerminalError(f"cluster {state.alias} did not become ready: {exc}; "
                                f"broker.log: {_tail(Path(state.dir) / 'broker.log')}") from None
    write_bootstrap(root)
    return states


def status(root: Path | None = None) -> list[dict[str, object]]:
    """One entry per cluster: alias, bootstrap, pid, running, answering."""
    from ferry.local.probe import answers

    result: list[dict[str, object]] = []
    for state in states_in(root):
        running = is_our_broker(state)
        answering = False
        if running:
            try:
                answering = answers(state.bootstrap, settings=admin_client_settings(state))
            except TerminalError:  # a secure cluster whose credentials are gone
                answering = False
        result.append({
            "alias": state.alias, "bootstrap": state.bootstrap,
            "pid": state.pid if running else None, "running": running,
            "answering": answering, "dir": state.dir,
        })
    return result


def down(root: Path | None = None, wipe: bool = False, timeout: float = 30.0) -> list[str]:
    """Stop every cluster `up` started in `root`; returns the aliases stopped. `wipe` also
    deletes their data and, with them, the secure profile's credentials and TLS files."""
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
        save_state(replace(state, pid=None))
    if wipe:
        for state in states:
            shutil.rmtree(state.dir, ignore_errors=True)
        (root / BOOTSTRAP_FILE).unlink(missing_ok=True)
        # The secure profile's shared files go with the clusters whose users they hold.
        (root / CREDENTIALS_FILE).unlink(missing_ok=True)
        shutil.rmtree(root / TLS_DIR, ignore_errors=True)
    return stopped

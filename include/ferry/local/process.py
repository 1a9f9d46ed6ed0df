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
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ferry.errors import FerryError, TerminalError, TransientError, UsageError
from ferry.jars import kafka_jars, log4j_config
from ferry.local import classdata
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
    NodeState,
    default_dir,
    load_state,
    save_state,
    states_in,
    write_bootstrap,
)
from ferry.local.pids import runs_with
from ferry.local.tls import TlsFiles, ensure_tls, write_atomic
from ferry.spark.classdata import java_binary

# The name these lines have always carried (`ferry.local.cluster`, the public face): log
# filters and readers of the lines need not know how the package is split.
log = logging.getLogger("ferry.local.cluster")

DEFAULT_ALIASES = ("source", "target")
READY_TIMEOUT_S = 90.0


def is_our_broker(state: ClusterState, node_id: int = 1) -> bool:
    """True when node `node_id`'s recorded pid is alive and is the broker of that very
    node's directory."""
    node = state.node(node_id)
    return runs_with(node.pid, "kafka.Kafka", str(node.dir / "server.properties"))


def all_running(state: ClusterState) -> bool:
    """True when every node of the cluster runs."""
    return all(is_our_broker(state, n.node_id) for n in state.nodes)


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


def _prepare(root: Path, alias: str, secure: bool, brokers: int,
             behind_proxy: bool = False) -> ClusterState:
    """The state of a cluster about to start: its recorded ports while all are still free,
    else new ones (per node: client and controller; a secure cluster's SASL_PLAINTEXT; a
    cluster behind a proxy, the proxied listener and the proxy's port). Pids are kept:
    nodes still running keep theirs."""
    cluster_dir = root / alias
    cluster_dir.mkdir(parents=True, exist_ok=True)
    old = load_state(cluster_dir)
    wanted = (3 if secure else 2) + 2 * (brokers - 1) + (2 if behind_proxy else 0)
    if old and old.brokers == brokers and (old.proxy_port is not None) == behind_proxy \
            and (old.sasl_plaintext_port is not None) == secure:
        # the proxy's port is not bound by the nodes (the proxy may hold it): not checked
        bound = [old.port, old.controller_port,
                 *(p for p in (old.sasl_plaintext_port, old.proxied_port) if p is not None),
                 *(port for p in old.peers for port in (p.port, p.controller_port))]
        held = _running_ports(old)
        if all(p in held or _port_free(p) for p in bound):
            return old
    ports = _free_ports(wanted)
    first = 3 if secure else 2
    peers = tuple(NodeState(k + 2, ports[first + 2 * k], ports[first + 2 * k + 1])
                  for k in range(brokers - 1))
    return ClusterState(alias, str(cluster_dir), port=ports[0], controller_port=ports[1],
                        secure=secure, sasl_plaintext_port=ports[2] if secure else None,
                        peers=peers, proxied_port=ports[-2] if behind_proxy else None,
                        proxy_port=ports[-1] if behind_proxy else None)


def _running_ports(state: ClusterState) -> set[int]:
    """The ports the cluster's running nodes hold."""
    running = {n.node_id for n in state.nodes if is_our_broker(state, n.node_id)}
    held = {p for n in state.nodes if n.node_id in running
            for p in (n.port, n.controller_port)}
    if 1 in running:
        held |= {p for p in (state.sasl_plaintext_port, state.proxied_port) if p is not None}
    return held


def _cluster_id() -> str:
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # StorageTool would read it as an option
            return cid


def _java() -> str:
    """The `java` the nodes run: `$JAVA_HOME/bin/java`, else the one on PATH (the same one
    their class-data archive is keyed on and checked with)."""
    java = java_binary()
    if java is None:
        raise TerminalError("java is not installed: install a JDK >= 17 (Kafka 4 needs it)")
    return java


def _run_java(args: list[str], jars: Path, log_file: Path | None = None,
              detach: bool = False, dump_to: Path | None = None) -> subprocess.Popen[bytes]:
    """A JVM on Kafka's `jars` running `args`, mapping the class-data archive, or writing
    one to `dump_to` at its exit (`ferry.local.classdata`)."""
    options = classdata.java_options(jars, dump_to)
    cmd = [_java(), "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
           *options, f"-Dlog4j2.configurationFile={log4j_config()}", "-cp", f"{jars}/*",
           *args]
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
               extra: Mapping[str, str] | None = None, brokers: int = 1,
               dump_to: Path | None = None, behind_proxy: bool = False) -> ClusterState:
    secure = security is not None
    cluster_dir = root / alias
    current = load_state(cluster_dir)
    if current and is_our_broker(current):
        if current.secure != secure:
            raise TerminalError(f"cluster {alias} is running {_profile(current.secure)}, not "
                                f"{_profile(secure)}: stop it first (ferry local down)")
        if current.brokers != brokers:
            raise TerminalError(f"cluster {alias} is running with {current.brokers} "
                                f"node(s), not {brokers}: stop it first (ferry local down)")
        if (current.proxy_port is not None) != behind_proxy:
            raise TerminalError(f"cluster {alias} is running "
                                f"{'behind' if current.proxy_port else 'without'} a proxy, "
                                "not as asked: stop it first (ferry local down)")
        if security is not None and security.new_passwords:
            raise TerminalError(f"cluster {alias} is running, but {root / CREDENTIALS_FILE} "
                                "was missing: stop and wipe it (ferry local down --wipe)")
        if all_running(current):
            log.info("cluster %s already running (pid %s)", alias, current.pid)
            return current
    formatted = (cluster_dir / "data" / "meta.properties").exists()
    was_secure = current.secure if current else False
    if formatted and was_secure != secure:
        raise TerminalError(f"cluster {alias} in {cluster_dir} holds {_profile(was_secure)} "
                            f"data, not {_profile(secure)}: wipe it first "
                            "(ferry local down --wipe)")
    if formatted and current is not None and current.brokers != brokers:
        raise TerminalError(f"cluster {alias} in {cluster_dir} holds the data of "
                            f"{current.brokers} node(s), not {brokers}: wipe it first "
                            "(ferry local down --wipe)")
    if formatted and security is not None and security.new_passwords:
        raise TerminalError(f"cluster {alias}: {root / CREDENTIALS_FILE} was missing, so its "
                            "SCRAM users have passwords no longer known: wipe it first "
                            "(ferry local down --wipe)")
    state = _prepare(root, alias, secure, brokers, behind_proxy)
    cluster_id = _cluster_id()
    for node in state.nodes:
        if not is_our_broker(state, node.node_id):
            state = _start_node(state, node.node_id, jars, security, extra, cluster_id,
                                dump_to)
    save_state(state)
    return state


def _start_node(state: ClusterState, node_id: int, jars: Path, security: _Security | None,
                extra: Mapping[str, str] | None, cluster_id: str,
                dump_to: Path | None = None) -> ClusterState:
    """Write node `node_id`'s properties, format its storage once (with `cluster_id`), start
    it detached (writing a class-data archive to `dump_to` at its exit); the state with its
    pid."""
    node = state.node(node_id)
    node.dir.mkdir(parents=True, exist_ok=True)
    props = node.dir / "server.properties"
    text = server_properties(state, security.passwords if security else None,
                             security.tls if security else None, extra, node_id)
    write_atomic(props, text.encode(), 0o600 if security else 0o644)  # JAAS: passwords
    log_file = node.dir / "broker.log"
    if not (node.dir / "data" / "meta.properties").exists():
        scram = scram_format_args(security.passwords) if security else []
        fmt = _run_java(["kafka.tools.StorageTool", "format", "-t", cluster_id,
                         "-c", str(props), *scram], jars, log_file)
        if fmt.wait(timeout=120) != 0:
            raise TerminalError(f"cluster {state.alias} node {node_id}: formatting storage "
                                f"failed; see {log_file}")
    proc = _run_java(["kafka.Kafka", str(props)], jars, log_file, detach=True,
                     dump_to=dump_to)
    return state.with_pid(node_id, proc.pid)


def _train_class_data(jars: Path) -> None:
    """Make the nodes' class-data archive if there is none: start a throwaway one-node
    cluster that writes it, wait until it answers, stop it cleanly (`ferry.local.classdata`).
    A failure is logged; nodes then start without the archive."""
    from ferry.local.probe import wait_ready

    try:
        with classdata.training(jars) as partial:
            if partial is None:
                return
            root = Path(tempfile.mkdtemp(prefix="ferry-classdata-"))
            try:
                state = _start_one(root, "training", jars, dump_to=partial)
                wait_ready(state.bootstrap, time.monotonic() + READY_TIMEOUT_S,
                           lambda: all_running(state), {}, brokers=1)
                stop_node(state, 1)  # SIGTERM: the JVM writes the archive as it exits
            finally:
                down(root, wipe=True)
                shutil.rmtree(root, ignore_errors=True)
        archive = classdata.archive_path(jars)
        if archive is not None and archive.is_file():
            log.info("local brokers: class-data archive made (%s)", archive)
        else:
            log.warning("local brokers start without a class-data archive: the training "
                        "node made none (not tried again for an hour)")
    except (FerryError, OSError, subprocess.SubprocessError) as exc:
        log.warning("local brokers start without a class-data archive: %s", exc)


def stop_node(state: ClusterState, node_id: int, hard: bool = False,
              timeout: float = 60.0) -> ClusterState:
    """Stop one node of a running cluster, cleanly (SIGTERM: a controlled shutdown that
    moves its leaders first) or `hard` (SIGKILL, as a crash), and wait until it is gone;
    the state with that node's pid cleared (saved). For rolling-restart tests."""
    node = state.node(node_id)
    if node.pid is not None and is_our_broker(state, node_id):
        os.kill(node.pid, signal.SIGKILL if hard else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while is_our_broker(state, node_id):
            if time.monotonic() > deadline:
                os.kill(node.pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.1)
        # A node this process started (start_node) is its child: reap it, or it stays a
        # zombie for as long as this process runs (a long rolling-restart test, a bench).
        with contextlib.suppress(ChildProcessError):
            os.waitpid(node.pid, os.WNOHANG)
    state = state.with_pid(node_id, None)
    save_state(state)
    return state


def start_node(state: ClusterState, node_id: int) -> ClusterState:
    """Start one stopped node again on its data, ports and `server.properties` as they
    are; returns once the process runs, not when it has caught up: wait for that with
    `under_replicated`."""
    if is_our_broker(state, node_id):
        return state
    node = state.node(node_id)
    props = node.dir / "server.properties"
    if not (node.dir / "data" / "meta.properties").exists():
        raise TerminalError(f"cluster {state.alias} node {node_id} was never started: use "
                            "ferry local up")
    proc = _run_java(["kafka.Kafka", str(props)], kafka_jars(), node.dir / "broker.log",
                     detach=True)
    state = state.with_pid(node_id, proc.pid)
    save_state(state)
    return state


def bounce_node(root: Path, alias: str, node_id: int, hard: bool,
                timeout: float = 300.0) -> float:
    """One step of a rolling restart: stop node `node_id` of cluster `alias` in `root`
    (SIGKILL when `hard`, else SIGTERM: a controlled shutdown), wait until the cluster
    has noticed (the node is gone from its metadata), start it again on its data and wait
    until every node is registered and no partition is under-replicated, as an operator
    waits before the next node. Returns the seconds it took; TerminalError when it takes
    longer than `timeout` or the node exits again."""
    from ferry.local.probe import registered, under_replicated

    (state,) = [s for s in states_in(root) if s.alias == alias]
    started = time.monotonic()
    deadline = started + timeout
    state = stop_node(state, node_id, hard=hard)
    while registered(state.bootstrap) >= state.brokers:
        if time.monotonic() > deadline:
            raise TerminalError(f"cluster {alias} never noticed node {node_id} stopped")
        time.sleep(0.2)
    state = start_node(state, node_id)
    # `under_replicated` is None when the cluster did not answer (a loaded machine, a
    # node still starting): not known to be whole, so not a reason to go on.
    while registered(state.bootstrap) < state.brokers or under_replicated(state.bootstrap) != 0:
        if not is_our_broker(state, node_id):
            log = state.node(node_id).dir / "broker.log"
            raise TerminalError(f"cluster {alias} node {node_id} exited after its restart; "
                                f"its log ends: {_tail(log)} (see {log})")
        if time.monotonic() > deadline:
            raise TerminalError(f"cluster {alias} was not fully replicated again "
                                f"{timeout:.0f} s after node {node_id} stopped")
        time.sleep(0.5)
    return time.monotonic() - started


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def up(aliases: tuple[str, ...] = DEFAULT_ALIASES, root: Path | None = None,
       secure: bool = False, timeout: float = READY_TIMEOUT_S,
       extra: Mapping[str, str] | None = None, wait: bool = True,
       brokers: int = 1, behind_proxy: bool = False) -> list[ClusterState]:
    """Start (or keep) one cluster of `brokers` KRaft nodes per alias and wait until each
    has every node registered and accepts produce/consume (as the super user over SASL_SSL
    for `secure` clusters, which have one node; see `ferry.local.cluster`). Nodes of a
    cluster that stopped are started again. `extra`: broker settings added to every new or
    restarted node's properties. Without `wait`, return as soon as the brokers are started:
    nothing has used them yet (tests of what a first client meets, e.g. a group
    coordinator never loaded). `behind_proxy` (one PLAINTEXT node per cluster): each
    broker has a second client listener advertising a port reserved for a proxy in front
    of it (`ClusterState.proxy_bootstrap`, `proxy_upstream`), for faults of the network
    between clients and the cluster (e.g. Toxiproxy); `bootstrap` stays direct."""
    from ferry.local.probe import wait_ready

    if brokers < 1:
        raise TerminalError(f"--brokers {brokers}: a cluster needs at least one node")
    if secure and brokers > 1:
        raise UsageError("the secure profile runs one node per cluster: drop --brokers "
                         "or --secure")
    if behind_proxy and (secure or brokers > 1):
        raise UsageError("--behind-proxy runs one PLAINTEXT node per cluster: drop "
                         "--brokers or --secure")
    root = (root or default_dir()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    jars = kafka_jars()
    _train_class_data(jars)
    security = None
    if secure:
        passwords, new = ensure_credentials(root)
        security = _Security(passwords, new, ensure_tls(root / TLS_DIR))
    with ThreadPoolExecutor(max_workers=len(aliases) or 1) as pool:
        states = list(pool.map(lambda a: _start_one(root, a, jars, security, extra, brokers,
                                                    behind_proxy=behind_proxy), aliases))
    if not wait:
        write_bootstrap(root)
        return states
    deadline = time.monotonic() + timeout
    for state in states:
        def alive(s: ClusterState = state) -> bool:
            return all_running(s)

        try:
            wait_ready(state.bootstrap, deadline, alive, admin_client_settings(state),
                       brokers=state.brokers)
        except TransientError as exc:
            raise TerminalError(f"cluster {state.alias} did not become ready: {exc}; "
                                f"broker.log: {_tail(Path(state.dir) / 'broker.log')}") from None
    write_bootstrap(root)
    return states


STATUS_PROBE_S = 10.0
"""How long `status` waits for a running cluster's metadata before it says the cluster is
not answering. A loaded machine answers in well under a second; a broker whose JVM is
paused, or starved of the cores, took longer than the three seconds this used to be."""


def status(root: Path | None = None) -> list[dict[str, object]]:
    """One entry per cluster: alias, bootstrap, pid, running, answering (its metadata came
    within `STATUS_PROBE_S`)."""
    from ferry.local.probe import answers

    result: list[dict[str, object]] = []
    for state in states_in(root):
        running = all_running(state)
        answering = False
        if running:
            try:
                answering = answers(state.bootstrap, timeout=STATUS_PROBE_S,
                                    settings=admin_client_settings(state))
            except TerminalError:  # a secure cluster whose credentials are gone
                answering = False
        result.append({
            "alias": state.alias, "bootstrap": state.bootstrap,
            "pid": state.pid if running else None, "running": running,
            "answering": answering, "dir": state.dir, "brokers": state.brokers,
            "proxy": proxy_of(state),
            "nodes": [{"node": n.node_id, "port": n.port,
                       "pid": n.pid if is_our_broker(state, n.node_id) else None}
                      for n in state.nodes],
        })
    return result


def proxy_of(state: ClusterState) -> dict[str, str] | None:
    """Where a proxy in front of a cluster `up` started behind one listens, and what it
    forwards to (None: not behind one)."""
    if state.proxy_bootstrap is None or state.proxy_upstream is None:
        return None
    return {"listen": state.proxy_bootstrap, "upstream": state.proxy_upstream}


def down(root: Path | None = None, wipe: bool = False, timeout: float = 30.0) -> list[str]:
    """Stop every cluster `up` started in `root`; returns the aliases stopped. `wipe` also
    deletes their data and, with them, the secure profile's credentials and TLS files."""
    root = (root or default_dir()).resolve()
    stopped: list[str] = []
    states = states_in(root)
    for state in states:
        for node in state.nodes:
            if node.pid is not None and is_our_broker(state, node.node_id):
                os.kill(node.pid, signal.SIGTERM)
                if state.alias not in stopped:
                    stopped.append(state.alias)
    deadline = time.monotonic() + timeout
    for state in states:
        for node in state.nodes:
            while is_our_broker(state, node.node_id) and time.monotonic() < deadline:
                time.sleep(0.2)
            if is_our_broker(state, node.node_id) and node.pid is not None:
                log.warning("cluster %s node %s did not stop in %.0fs; killing pid %s",
                            state.alias, node.node_id, timeout, node.pid)
                os.kill(node.pid, signal.SIGKILL)
                while is_our_broker(state, node.node_id):
                    time.sleep(0.1)
            state = state.with_pid(node.node_id, None)
        save_state(state)
    if wipe:
        for state in states:
            shutil.rmtree(state.dir, ignore_errors=True)
        (root / BOOTSTRAP_FILE).unlink(missing_ok=True)
        # The secure profile's shared files go with the clusters whose users they hold.
        (root / CREDENTIALS_FILE).unlink(missing_ok=True)
        shutil.rmtree(root / TLS_DIR, ignore_errors=True)
    return stopped

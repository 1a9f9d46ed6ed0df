"""Start, inspect and stop single-node KRaft clusters on loopback.

Each cluster lives in `<dir>/<alias>/`: `server.properties`, `data/`, `broker.log` and
`cluster.json` (alias, ports, pid). Stopping signals only a pid recorded there, and only
after checking that the process is the broker started from that very directory (never a
broad kill). `<dir>/bootstrap.properties` lists `<alias>.bootstrap.servers=...` for every
cluster, ready for a `${file:...}` reference in an mm2.properties.

The secure profile (`up(..., secure=True)`) runs each broker with SASL + ACLs:

- `SASL_SSL` on the client port (`ClusterState.port`, what `bootstrap.properties` lists),
  `SASL_PLAINTEXT` on a second client port (`sasl_plaintext_port`, also the inter-broker
  listener), both offering PLAIN and SCRAM-SHA-512; the controller listener stays PLAINTEXT
  (its principal, `User:ANONYMOUS`, is therefore a super user, as KRaft needs);
- `StandardAuthorizer` with `allow.everyone.if.no.acl.found=false`: only `admin` (the super
  user) may do anything until ACLs say otherwise;
- TLS from a private CA in `<dir>/tls/` (`ca.pem` trusts every secure cluster of `<dir>`);
- the test principals `admin`, `ferry` (the mirror), `alice` (a reader) and `mallory` (no
  rights), each a PLAIN user (JAAS) and a SCRAM-SHA-512 user (added when the storage is
  formatted), with random passwords kept in `<dir>/credentials.properties` (mode 0600):
  `credentials(dir)` reads them, `client_settings` / `admin_client_settings` build
  librdkafka settings from them.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ferry.config.properties import parse_properties
from ferry.errors import TerminalError, TransientError
from ferry.local.tls import TlsFiles, ensure_tls, write_atomic
from ferry.spark.jars import kafka_jars, log4j_config

log = logging.getLogger(__name__)

DEFAULT_ALIASES = ("source", "target")
READY_TIMEOUT_S = 90.0

# The secure profile's principals: the super user, the mirror, a reader, a user with no rights.
SUPER_USER = "admin"
USERS = (SUPER_USER, "ferry", "alice", "mallory")
MECHANISMS = ("PLAIN", "SCRAM-SHA-512")
CREDENTIALS_FILE = "credentials.properties"
TLS_DIR = "tls"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class ClusterState:
    """What `cluster.json` records about one local cluster."""

    alias: str
    dir: str
    port: int
    controller_port: int
    pid: int | None = None
    secure: bool = False
    sasl_plaintext_port: int | None = None  # secure clusters only

    @property
    def bootstrap(self) -> str:
        """The client listener: PLAINTEXT, or SASL_SSL for a secure cluster."""
        return f"127.0.0.1:{self.port}"

    @property
    def plaintext_bootstrap(self) -> str | None:
        """A secure cluster's SASL_PLAINTEXT listener (None for a PLAINTEXT cluster)."""
        if self.sasl_plaintext_port is None:
            return None
        return f"127.0.0.1:{self.sasl_plaintext_port}"

    @property
    def root(self) -> Path:
        """The directory `up` was given: it holds this cluster's directory."""
        return Path(self.dir).parent


@dataclass(frozen=True)
class SecureClusters:
    """Where the secure clusters of one directory listen, and how to reach them."""

    root: Path
    bootstrap: dict[str, str]  # alias -> SASL_SSL host:port
    plaintext_bootstrap: dict[str, str]  # alias -> SASL_PLAINTEXT host:port
    ca: Path
    passwords: dict[str, str]  # user -> password

    @classmethod
    def of(cls, root: Path, states: Iterable[ClusterState]) -> SecureClusters:
        """The secure clusters `up(..., root, secure=True)` returned."""
        root = root.resolve()
        states = list(states)
        if not all(s.secure and s.plaintext_bootstrap for s in states):
            raise ValueError("SecureClusters needs clusters started with secure=True")
        return cls(root=root, bootstrap={s.alias: s.bootstrap for s in states},
                   plaintext_bootstrap={s.alias: str(s.plaintext_bootstrap) for s in states},
                   ca=root / TLS_DIR / "ca.pem", passwords=credentials(root))

    def client(self, alias: str, user: str = SUPER_USER, mechanism: str = "PLAIN",
               tls: bool = True) -> dict[str, str]:
        """librdkafka settings for `user` on cluster `alias` (SASL_SSL, or SASL_PLAINTEXT)."""
        bootstrap = self.bootstrap[alias] if tls else self.plaintext_bootstrap[alias]
        return _sasl_settings(bootstrap, user, self.passwords[user], mechanism,
                              self.ca if tls else None)


def default_dir() -> Path:
    return Path(os.environ.get("FERRY_HOME") or Path.home() / ".ferry") / "local"


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


def _cluster_id() -> str:
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # StorageTool would read it as an option
            return cid


def server_properties(state: ClusterState, passwords: Mapping[str, str] | None = None,
                      tls: TlsFiles | None = None,
                      extra: Mapping[str, str] | None = None) -> str:
    """A single-node combined broker+controller config on loopback: PLAINTEXT, or for a
    secure cluster SASL_SSL + SASL_PLAINTEXT with ACLs (then `passwords` and `tls` are
    needed). `extra` broker settings go last (they win): tests compress time with them,
    e.g. `offsets.retention.minutes=1`."""
    data = Path(state.dir) / "data"
    if state.secure:
        if passwords is None or tls is None:
            raise ValueError("a secure cluster's properties need its passwords and TLS files")
        listeners = _secure_listeners(state, passwords, tls)
    else:
        listeners = [
            f"listeners=PLAINTEXT://127.0.0.1:{state.port},"
            f"CONTROLLER://127.0.0.1:{state.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{state.port}",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
        ]
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{state.controller_port}",
        *listeners,
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
        *(f"{key}={value}" for key, value in (extra or {}).items()),
        "",
    ])


def _secure_listeners(state: ClusterState, passwords: Mapping[str, str],
                      tls: TlsFiles) -> list[str]:
    plain_jaas = " ".join([
        "org.apache.kafka.common.security.plain.PlainLoginModule required",
        # The broker's own identity on the inter-broker listener (SASL_PLAINTEXT + PLAIN).
        f'username="{SUPER_USER}" password="{passwords[SUPER_USER]}"',
        *(f'user_{user}="{passwords[user]}"' for user in USERS),
    ]) + ";"
    scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    lines = [
        f"listeners=SASL_SSL://127.0.0.1:{state.port},"
        f"SASL_PLAINTEXT://127.0.0.1:{state.sasl_plaintext_port},"
        f"CONTROLLER://127.0.0.1:{state.controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{state.port},"
        f"SASL_PLAINTEXT://127.0.0.1:{state.sasl_plaintext_port}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        f"sasl.enabled.mechanisms={','.join(MECHANISMS)}",
    ]
    for listener in ("sasl_ssl", "sasl_plaintext"):
        lines += [
            f"listener.name.{listener}.sasl.enabled.mechanisms={','.join(MECHANISMS)}",
            f"listener.name.{listener}.plain.sasl.jaas.config={plain_jaas}",
            f"listener.name.{listener}.scram-sha-512.sasl.jaas.config={scram_jaas}",
        ]
    lines += [
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={tls.keystore}",
        *([f"ssl.key.password={tls.key_password}"] if tls.key_password else []),
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={tls.ca}",
        "ssl.client.auth=none",
        f"authorizer.class.name={AUTHORIZER}",
        # ANONYMOUS: the principal of the PLAINTEXT controller listener, which the broker
        # half uses to talk to its controller.
        f"super.users=User:{SUPER_USER};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found=false",
    ]
    return lines


def credentials(root: Path | None = None) -> dict[str, str]:
    """user -> password of the secure clusters' principals in `root`."""
    root = (root or default_dir()).resolve()
    path = root / CREDENTIALS_FILE
    try:
        raw = parse_properties(path.read_text())
    except OSError:
        raise TerminalError(f"no {path}: start the secure clusters first "
                            "(ferry local up --secure)") from None
    missing = [user for user in USERS if not raw.get(f"{user}.password")]
    if missing:
        raise TerminalError(f"{path} has no password for {', '.join(missing)}; wipe the "
                            "local clusters (ferry local down --wipe) and start them again")
    return {user: raw[f"{user}.password"] for user in USERS}


def _ensure_credentials(root: Path) -> tuple[dict[str, str], bool]:
    """The principals' passwords of `root`, generated (True) when there were none."""
    if (root / CREDENTIALS_FILE).exists():
        return credentials(root), False
    passwords = {user: secrets.token_urlsafe(18) for user in USERS}
    text = "".join(f"{user}.password={pw}\n" for user, pw in passwords.items())
    write_atomic(root / CREDENTIALS_FILE,
                 ("# Passwords of the local secure clusters' principals (generated).\n"
                  + text).encode(), 0o600)
    return passwords, True


def _sasl_settings(bootstrap: str, user: str, password: str, mechanism: str,
                   ca: Path | None) -> dict[str, str]:
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism {mechanism!r}: the local clusters offer {MECHANISMS}")
    settings = {"bootstrap.servers": bootstrap,
                "security.protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    if ca:
        settings["ssl.ca.location"] = str(ca)
    return settings


def client_settings(state: ClusterState, user: str = SUPER_USER, mechanism: str = "PLAIN",
                    tls: bool = True) -> dict[str, str]:
    """librdkafka settings (with `bootstrap.servers`) for `user` on a secure cluster: over
    SASL_SSL trusting the local CA, or over SASL_PLAINTEXT when `tls` is False."""
    if not state.secure or state.plaintext_bootstrap is None:
        raise ValueError(f"cluster {state.alias} is not a secure cluster")
    password = credentials(state.root)[user]
    if tls:
        return _sasl_settings(state.bootstrap, user, password, mechanism,
                              state.root / TLS_DIR / "ca.pem")
    return _sasl_settings(state.plaintext_bootstrap, user, password, mechanism, None)


def admin_client_settings(state: ClusterState) -> dict[str, str]:
    """librdkafka settings of the super user (with `bootstrap.servers`): SASL_SSL + PLAIN as
    `admin` for a secure cluster, just `bootstrap.servers` for a PLAINTEXT one."""
    if not state.secure:
        return {"bootstrap.servers": state.bootstrap}
    return client_settings(state, SUPER_USER, "PLAIN", tls=True)


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


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = _free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _prepare(root: Path, alias: str, secure: bool) -> ClusterState:
    cluster_dir = root / alias
    cluster_dir.mkdir(parents=True, exist_ok=True)
    old = _load(cluster_dir)
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
    current = _load(cluster_dir)
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
        scram = [arg for user, password in (security.passwords.items() if security else ())
                 for arg in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]")]
        fmt = _run_java(["kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                         "-c", str(props), *scram], jars, log_file)
        if fmt.wait(timeout=120) != 0:
            raise TerminalError(f"cluster {alias}: formatting storage failed; see {log_file}")
    proc = _run_java(["kafka.Kafka", str(props)], jars, log_file, detach=True)
    state = replace(state, pid=proc.pid)
    _save(state)
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
    (as the super user over SASL_SSL for `secure` clusters; see the module docstring).
    `extra`: broker settings added to every new or restarted cluster's properties.
    Without `wait`, return as soon as the brokers are started: nothing has used them yet
    (tests of what a first client meets, e.g. a group coordinator never loaded)."""
    from ferry.local.probe import wait_ready

    root = (root or default_dir()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    jars = kafka_jars()
    security = None
    if secure:
        passwords, new = _ensure_credentials(root)
        security = _Security(passwords, new, ensure_tls(root / TLS_DIR))
    with ThreadPoolExecutor(max_workers=len(aliases) or 1) as pool:
        states = list(pool.map(lambda a: _start_one(root, a, jars, security, extra), aliases))
    if not wait:
        _write_bootstrap(root)
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
        _save(replace(state, pid=None))
    if wipe:
        for state in states:
            shutil.rmtree(state.dir, ignore_errors=True)
        (root / "bootstrap.properties").unlink(missing_ok=True)
        # The secure profile's shared files go with the clusters whose users they hold.
        (root / CREDENTIALS_FILE).unlink(missing_ok=True)
        shutil.rmtree(root / TLS_DIR, ignore_errors=True)
    return stopped

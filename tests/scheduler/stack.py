"""A real Airflow for the flow DAGs: the components `airflow standalone` would run,
started one by one in their own AIRFLOW_HOME, so that each listens on loopback only or not
at all (standalone's scheduler and triggerer start log servers bound to every interface;
Airflow has no setting for their host):

- `airflow db migrate` (SQLite in AIRFLOW_HOME), then
- `airflow api-server` on 127.0.0.1 on a free port (the core API, and the execution API the
  tasks reach there),
- `airflow scheduler --skip-serve-logs` (LocalExecutor, as standalone chooses; no log
  server: the api-server reads the task logs from the local disk), and
- `airflow dag-processor` (it listens on nothing).

No triggerer: the flow DAGs have no deferrable task. Its DAG folder links the repo's
`dags/ferry_flows.py` (and any DAG file a caller adds, such as a DAG downstream of a flow's
Assets); FERRY_CONFIG names the config. Callers drive it through the REST API
(`Airflow`), as a user the stack creates (SimpleAuthManager). Each component runs in a
process group of its own; `stop` ends them all and every process they started (task runners
and spark-submit have process groups of their own). The scheduler tests (one stack for the
tier, `conftest.py`) and `bench/latency.py` use it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import psutil  # type: ignore[import-untyped]  # an Airflow dependency, without type hints

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
USER, PASSWORD = "ferry-ops", "ops-" + secrets.token_hex(8)
FINISHED = ("success", "failed")
LOCKED_FOR_S = 60.0
"""How long a call refused for SQLite's lock (HTTP 500 "Database error") is asked again."""
T = TypeVar("T")
LOCAL_SPARK = {"conn_type": "spark", "host": "local[*]"}


@dataclass(frozen=True)
class TaskTry:
    state: str | None
    try_number: int


class Airflow:
    """The running Airflow (what `airflow standalone` would run, minus the triggerer and the
    log servers), driven through its api-server's REST API."""

    def __init__(self, url: str) -> None:
        self.url = url
        """http://127.0.0.1:<port>, no trailing slash."""
        self._token: str | None = None

    def token(self) -> str:
        """A JWT for USER from the api-server's token endpoint (as a script would)."""
        if self._token is None:
            answer = self._request("POST", "/auth/token",
                                   {"username": USER, "password": PASSWORD}, auth=False)
            self._token = str(answer["access_token"])
        return self._token

    def api(self, method: str, path: str, body: dict[str, Any] | None = None,
            **query: str) -> Any:
        """JSON from /api/v2`path`."""
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        return self._request(method, f"/api/v2{path}{suffix}", body)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None,
                 auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers=headers,
            data=None if body is None else json.dumps(body).encode())
        deadline = time.monotonic() + LOCKED_FOR_S
        pause = 0.5
        while True:
            try:
                with urllib.request.urlopen(request, timeout=90) as answer:
                    return json.load(answer)
            except urllib.error.HTTPError as exc:
                text = exc.read().decode(errors="replace")
                # the api-server's write waited out its short wait for SQLite's lock
                # (sqlite.py) and wrote nothing: asked again, as an operator would
                if (exc.code == 500 and "Database error" in text
                        and time.monotonic() + pause < deadline):
                    time.sleep(pause)
                    pause = min(pause * 2, 4.0)
                    continue
                raise AssertionError(f"{method} {path}: HTTP {exc.code}: {text[:2000]}") from None

    def trigger(self, dag_id: str) -> str:
        """Unpause the DAG and trigger a run of it now; its run id."""
        self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None})
        return str(run["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs (the first 100), oldest first (by `run_after`)."""
        found = self.api("GET", f"/dags/{dag_id}/dagRuns", limit="100")
        return sorted(found["dag_runs"], key=lambda r: r["run_after"])

    def stop_dag(self, dag_id: str, timeout: float) -> None:
        """Pause the DAG and end its runs still going as an operator would: marked failed,
        each then waited for (its tasks are sent SIGTERM)."""
        self.api("PATCH", f"/dags/{dag_id}", {"is_paused": True})
        for run in self.runs(dag_id):
            if run["state"] in ("running", "queued"):
                self.api("PATCH", f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}",
                         {"state": "failed"})
                self.finished(dag_id, run["dag_run_id"], timeout)

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def tasks(self, dag_id: str, run_id: str) -> dict[str, TaskTry]:
        """task id -> its current state and try number."""
        found = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: TaskTry(ti["state"], int(ti["try_number"]))
                for ti in found["task_instances"]}

    def finished(self, dag_id: str, run_id: str, timeout: float) -> str:
        """Wait until the run has finished; its state. A run still going after `timeout`
        fails the test with where it is (`progress`)."""
        # asked twice a second: the tests wait on runs one after the other, a GET is cheap
        try:
            return wait_for(f"run {run_id} of {dag_id} to finish", timeout, lambda: (
                state if (state := self.run_state(dag_id, run_id)) in FINISHED else None),
                every=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.progress(dag_id, run_id)}") from None

    def progress(self, dag_id: str, run_id: str) -> str:
        """Where a run is, for a failure's message: each task's state, try, start and end
        (from the REST API), and the last lines of the log of each task that started and
        has not succeeded."""
        found = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        lines, tails = [], []
        for ti in found["task_instances"]:
            lines.append(f"  {ti['task_id']}: {ti['state']} (try {ti['try_number']}), "
                         f"queued {ti.get('queued_when')}, started {ti.get('start_date')}, "
                         f"ended {ti.get('end_date')}")
            if ti["start_date"] and ti["state"] != "success":
                entries = self.task_log_entries(dag_id, run_id, ti["task_id"],
                                                int(ti["try_number"]))
                tails.append(f"--- {ti['task_id']}, its log's last lines:")
                tails += [f"{e.get('timestamp', '')} {str(e.get('event', ''))[:300]}"
                          if isinstance(e, dict) else str(e)[:300] for e in entries[-40:]]
        return "\n".join([f"{dag_id} {run_id}, now {datetime.now().astimezone():%H:%M:%S}:",
                          *lines, *tails])

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """The task's XCom `key` (default: its return value)."""
        entry = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
                                f"/xcomEntries/{key}", deserialize="true")
        value = entry["value"]
        return json.loads(value) if isinstance(value, str) else value

    def task_log_entries(self, dag_id: str, run_id: str, task_id: str,
                         try_number: int) -> list[Any]:
        """One attempt's task log as Airflow stores it: an entry (a dict with its event,
        level, logger, ...) per line."""
        found = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
                                f"/logs/{try_number}", full_content="true")
        return list(found["content"])

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """One attempt's task log, a line per entry (its event, then its other fields)."""
        lines = []
        for entry in self.task_log_entries(dag_id, run_id, task_id, try_number):
            if isinstance(entry, dict):
                rest = {k: v for k, v in entry.items() if k != "event"}
                lines.append(f"{entry.get('event', '')} {json.dumps(rest, default=str)}")
            else:
                lines.append(str(entry))
        return "\n".join(lines)


def wait_for(what: str, timeout: float, check: Callable[[], T | None],
             every: float = 1.0) -> T:
    """Poll `check` until it returns something other than None (or fail after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def processes_naming(text: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose command line contains `text`."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if process.info["status"] != psutil.STATUS_ZOMBIE and any(text in a for a in cmdline):
            found.append(process)
    return found


def processes_left(text: str, timeout: float) -> list[str]:
    """The command lines of the processes naming `text` still running once `timeout` has
    passed; [] as soon as there are none."""
    deadline = time.monotonic() + timeout
    while (found := processes_naming(text)) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = []
    for process in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            left.append(" ".join(process.cmdline()))
    return left


def _free_port() -> int:
    """A loopback port free right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _environment(home: Path, config_path: Path, spark_conn: dict[str, Any],
                 viewers: dict[str, str]) -> tuple[dict[str, str], int]:
    """The test process's environment without any Airflow or Spark setting of its own (as
    scripts/test.sh), plus this Airflow's; and the api-server's port. Its users: USER, an
    admin, and `viewers` (name -> password)."""
    dropped = ("SPARK_HOME", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AIRFLOW") and k not in dropped}
    dags = home / "dags"
    dags.mkdir(parents=True)
    (dags / "ferry_flows.py").symlink_to(ROOT / "dags" / "ferry_flows.py")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD, **viewers}))
    users = ",".join([f"{USER}:admin", *(f"{name}:viewer" for name in viewers)])
    port = _free_port()
    return env | {
        # the venv's bin first, as in a shell with the venv activated
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        # `tests.scheduler.sqlite` importable by Airflow's processes
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "tests.scheduler.sqlite.CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC":
            "tests.scheduler.sqlite.ASYNC_CONNECT_ARGS",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # what standalone would force (they are Airflow's defaults too)
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple"
                                       ".simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": users,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        # the api-server's command line says so too (_COMPONENTS)
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(48),
        # the scheduler's health server would listen on 0.0.0.0 (off by default: kept off)
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # A run is one chain of tasks and a test runs three at most (a flow's, a failover's
        # and an adoption's): the LocalExecutor's default 32 worker processes only load a
        # small machine; the DAG file does not change, so it is parsed once, not every 30 s.
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_conn),
        "FERRY_CONFIG": str(config_path),
    }, port


def _components(port: int) -> dict[str, list[str]]:
    """name -> `airflow` arguments of each long-running component, in start order."""
    return {
        "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(port),
                       "--workers", "1"],
        "scheduler": ["scheduler", "--skip-serve-logs"],
        "dag-processor": ["dag-processor"],
    }


COMPONENT_ENV = {
    # its event loop must not wait long for SQLite's lock (sqlite.py)
    "api-server": {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS":
            "tests.scheduler.sqlite.API_SERVER_CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC":
            "tests.scheduler.sqlite.ASYNC_API_SERVER_CONNECT_ARGS",
    },
}
"""name -> environment a component has in place of the stack's."""


@dataclass(frozen=True)
class Component:
    """One `airflow ...` process, leader of its own process group, and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def _start(name: str, args: list[str], env: dict[str, str], home: Path,
           cwd: Path, append: bool = False) -> Component:
    """`airflow <args>` in a new session (its own process group), output to <name>.log
    (after what it holds, with `append`)."""
    log = home / f"{name}.log"
    with log.open("ab" if append else "wb") as out:
        process = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), *args],
                                   env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=cwd)
    return Component(name, process, log)


class Components(list[Component]):
    """The running components, in start order, and how to end one and start it again as
    it was (the fault tests' scheduler and api-server): the same command, environment and
    log (appended to)."""

    def __init__(self, env: dict[str, str], home: Path, cwd: Path, port: int) -> None:
        super().__init__()
        self._env, self._home, self._cwd = env, home, cwd
        self._args = _components(port)

    def start(self, name: str) -> Component:
        """Start the component `name` (again, after `end`)."""
        started = _start(name, self._args[name], self._env | COMPONENT_ENV.get(name, {}),
                         self._home, self._cwd, append=True)
        self[:] = [c for c in self if c.name != name] + [started]
        return started

    @property
    def names(self) -> list[str]:
        """Every component's name, in start order."""
        return list(self._args)

    def named(self, name: str) -> Component:
        return next(c for c in self if c.name == name)

    def end(self, name: str, sig: signal.Signals, timeout: float = 30) -> None:
        """Send `sig` to the component `name` alone (not its process group: the executor's
        workers and their tasks live on, as after a crash of the component itself), and
        wait until it has exited."""
        process = self.named(name).process
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"airflow {name} still runs {timeout:.0f}s after {sig.name}"
                                 ) from None


def _migrate(env: dict[str, str], home: Path, cwd: Path, timeout: float = 300) -> Component:
    """`airflow db migrate` (creates the SQLite database), to its end."""
    migrate = _start("db-migrate", ["db", "migrate"], env, home, cwd)
    try:
        migrate.process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(migrate.process.pid, signal.SIGKILL)
        migrate.process.wait(10)
        raise AssertionError(f"airflow db migrate took over {timeout:.0f}s:\n"
                             + migrate.tail()) from None
    if migrate.process.returncode != 0:
        raise AssertionError(f"airflow db migrate failed ({migrate.process.returncode}):\n"
                             + migrate.tail())
    return migrate


def _wait_ready(standalone: Airflow, components: list[Component], dag_ids: list[str],
                timeout: float = 240) -> None:
    """Until the scheduler and the dag-processor are healthy and the DAGs `dag_ids` are parsed
    (a component's exit or an import error of the DAG file fails at once, with its output)."""
    def ready() -> bool | None:
        for component in components:
            if component.process.poll() is not None:
                raise AssertionError(
                    f"airflow {component.name} exited ({component.process.returncode}):\n"
                    + component.tail())
        try:
            with urllib.request.urlopen(f"{standalone.url}/api/v2/monitor/health",
                                        timeout=5) as answer:
                health = json.load(answer)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None
        if any((health.get(part) or {}).get("status") != "healthy"
               for part in ("scheduler", "dag_processor")):
            return None
        errors = standalone.api("GET", "/importErrors")["import_errors"]
        if errors:
            raise AssertionError(f"the DAG file does not import: {errors}")
        dags = {d["dag_id"] for d in standalone.api("GET", "/dags", limit="100")["dags"]}
        return True if set(dag_ids) <= dags else None

    wait_for("the Airflow components to be ready", timeout, ready)


def _ours(components: list[Component], base: Path) -> list[psutil.Process]:
    """Every process of these components: the components, their descendants (task runners
    and spark-submit in process groups of their own), and any process orphaned since that
    names this module's folder (a copy job's JVM or Python driver: its config and plan are
    there)."""
    found: dict[int, psutil.Process] = {}
    for component in components:
        try:
            root = psutil.Process(component.process.pid)
            found[root.pid] = root
            for process in root.children(recursive=True):
                found[process.pid] = process
        except psutil.NoSuchProcess:
            pass
    for process in processes_naming(f"{base}{os.sep}"):
        found.setdefault(process.pid, process)
    return list(found.values())


def _is_loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4-mapped loopback address (::ffff:127.0.0.1, as a JVM
    binds); not the wildcards 0.0.0.0 and ::."""
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _listening(components: list[Component], base: Path) -> list[tuple[str, str, int]]:
    """(process, address, port) of every TCP socket a process of these components listens
    on."""
    found = []
    for process in _ours(components, base):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            name = f"{process.pid} {' '.join(process.cmdline()).strip()[:120]}"
            for conn in process.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((name, str(conn.laddr.ip), int(conn.laddr.port)))
    return sorted(set(found))


def _assert_loopback_only(components: list[Component], base: Path, port: int) -> None:
    """Every listening socket of these components is on loopback, and the api-server's
    127.0.0.1:`port` is among them (so the check sees the sockets it checks)."""
    listening = _listening(components, base)
    shown = "\n".join(f"  {f'[{ip}]' if ':' in ip else ip}:{p}  ({who})"
                      for who, ip, p in listening)
    assert ("127.0.0.1", port) in {(ip, p) for _, ip, p in listening}, (
        f"the api-server does not listen on 127.0.0.1:{port}; listening:\n{shown}")
    outside = [(who, ip, p) for who, ip, p in listening if not _is_loopback(ip)]
    assert not outside, f"Airflow listens beyond loopback:\n{shown}"


def _running(process: psutil.Process) -> bool:
    """Alive and not a zombie: this machine's init does not reap orphans, so a process that
    ended after its parent stays a zombie, holding nothing."""
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _stop(components: list[Component], base: Path) -> None:
    """SIGTERM to each component's process group (the components and the executor's workers
    stop in seconds), then to whatever else of them is left, by pid (task runners and
    spark-submit have process groups of their own); SIGKILL for any still there after 15 s."""
    left = _ours(components, base)
    for component in components:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(component.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for component in components:
        with contextlib.suppress(subprocess.TimeoutExpired):
            component.process.wait(max(0.0, deadline - time.monotonic()))
    left = list({p.pid: p for p in left + _ours(components, base)}.values())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = [p for p in left if _running(p)]
        for survivor in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                survivor.send_signal(sig)
        deadline = time.monotonic() + 15
        while (left := [p for p in left if _running(p)]) and time.monotonic() < deadline:
            time.sleep(0.2)
    for component in components:
        if component.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.process.pid, signal.SIGKILL)
            component.process.wait(10)


def keep_logs(home: Path, module: str, failures: str = "") -> None:
    """The components' logs and the task logs, into test-artifacts/; `failures`: the
    module's failed tests as pytest reported them (kept beside the logs, since a CI run's
    output may be lost)."""
    target = ARTIFACTS / f"scheduler-{module}-{datetime.now():%Y%m%d-%H%M%S}"
    target.mkdir(parents=True, exist_ok=True)
    if failures:
        (target / "failures.txt").write_text(failures)
    for log in home.glob("*.log"):
        shutil.copy(log, target / log.name)
    if (home / "logs").is_dir():
        shutil.copytree(home / "logs", target / "logs", dirs_exist_ok=True)




@contextlib.contextmanager
def running(base: Path, config_path: Path, dag_ids: Iterable[str],
            spark_conn: dict[str, Any] | None = None,
            extra_env: dict[str, str] | None = None,
            dag_files: dict[str, str] | None = None,
            viewers: dict[str, str] | None = None,
            ) -> Iterator[tuple[Airflow, Components]]:
    """Airflow in `base`/airflow, ready (healthy, the DAGs parsed) and listening on loopback
    only; stopped on exit, with everything it started. `spark_conn`: the `spark_default`
    connection (default: spark, local[*]); `extra_env`: more environment for every
    component; `dag_files`: file name -> source of more DAG files beside `ferry_flows.py`
    (`dag_ids` names their DAGs too, to wait for them); `viewers`: users with Airflow's
    viewer role beside the admin USER, name -> password."""
    home = base / "airflow"
    env, port = _environment(home, config_path, spark_conn or LOCAL_SPARK, viewers or {})
    env |= extra_env or {}
    for name, source in (dag_files or {}).items():
        (home / "dags" / name).write_text(source)
    components = Components(env, home, base, port)
    try:
        _migrate(env, home, base)
        for name in components.names:
            components.start(name)
        server = Airflow(f"http://127.0.0.1:{port}")
        _wait_ready(server, components, list(dag_ids))
        _assert_loopback_only(components, base, port)
        yield server, components
        # anything a component opened since start-up is held to the same rule
        _assert_loopback_only(components, base, port)
    finally:
        _stop(components, base)

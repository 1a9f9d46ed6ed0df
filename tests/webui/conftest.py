"""A real Airflow api-server with the Ferry plugin, for the browser and auth tests.

One api-server per test module: its own AIRFLOW_HOME (SQLite, `airflow db migrate`),
SimpleAuthManager with one user whose password the test sets, the Ferry plugin from the
package's entry point, and FERRY_CONFIG pointing at a flow over the session's real
clusters with a topic that has records not mirrored yet, and at a second flow into the same
target whose source names an Airflow connection that does not exist (its heartbeats on the
target). Stopped at teardown, also when a test fails.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.config import MirrorConfig, load_config
from ferry.core.heartbeats import Heartbeat, encode
from ferry.core.internal import offset_map_topic
from ferry.core.offsetmap import MapEntry, Segment
from ferry.core.offsetmap import encode as map_record
from ferry.steps.lag import record_lag
from tests.support.kafka_data import create_topic, flow_config, produce, run_cycle

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "ops", "ops-" + secrets.token_hex(8)


@dataclass(frozen=True)
class AirflowServer:
    url: str
    """http://127.0.0.1:<port>, no trailing slash."""
    config: MirrorConfig
    topic: str
    """The source topic: partition 0 has 7 records not mirrored yet, partition 1 none."""
    scrape_token: str
    log: Path
    unconnected: str
    """The flow whose clusters' connections Airflow does not have (`A->B`)."""
    missing: str
    """The id of its source's connection."""

    def token(self) -> str:
        """A JWT for USER from the api-server's token endpoint (as a CLI or script would)."""
        request = urllib.request.Request(
            f"{self.url}/auth/token", method="POST",
            data=json.dumps({"username": USER, "password": PASSWORD}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            token: str = json.load(answer)["access_token"]
        return token


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _environment(home: Path, port: int, config_path: str, scrape_token: str) -> dict[str, str]:
    """The test process's environment without any Airflow setting of its own (another
    suite's AIRFLOW_HOME), plus this server's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    (home / "dags").mkdir(parents=True, exist_ok=True)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    return env | {
        "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        # the plugin comes from the package's entry point, as in any Airflow it is installed in
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(48),
        "FERRY_CONFIG": config_path,
        "FERRY_METRICS_TOKEN": scrape_token,
    }


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path,
                  timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"airflow api-server exited ({process.returncode}):\n"
                                 + log.read_text()[-4000:])
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"airflow api-server not healthy in {timeout:.0f}s:\n"
                         + log.read_text()[-4000:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the api-server and the workers it started (its own process group)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(20)


@pytest.fixture(scope="module")
def airflow_server(clusters: dict[str, str], tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[AirflowServer]:
    base = tmp_path_factory.mktemp("webui")
    topic = f"webui-orders-{uuid.uuid4().hex[:6]}"
    create_topic(clusters["source"], topic, 2)
    produce(clusters["source"], topic, [(None, f"v{i}".encode(), i % 2) for i in range(40)])
    config = flow_config(base, clusters, topic)
    flow = config.enabled_flows[0]
    record_lag(flow, "before-mirroring")  # the lag chart's first point: 20 + 20
    run_cycle(flow)
    produce(clusters["source"], topic, [(None, b"late", 0)] * 7)  # lag: 7 on partition 0
    record_lag(flow, "after-mirroring")
    # A second flow into the same target, from a cluster known only by a connection Airflow
    # does not have (added once the first is set up: loading the file now would look it
    # up); its heartbeats reached the target, as an earlier setup of it mirrored them.
    tag = uuid.uuid4().hex[:6]
    far, missing = f"far_src_{tag}", f"kafka_gone_{tag}"
    path = Path(config.path)
    clusters_line = f"clusters = {flow.source}, {flow.target}\n"
    text = path.read_text()
    assert clusters_line in text
    path.write_text(text.replace(clusters_line, clusters_line.rstrip("\n") + f", {far}\n")
                    + f"{far}.ferry.connection = {missing}\n"
                    f"{far}->{flow.target}.enabled = true\n{far}->{flow.target}.topics = {topic}\n")
    beats, now_ms = f"{far}.heartbeats", int(time.time() * 1000)
    create_topic(clusters["target"], beats, 1)
    produce(clusters["target"], beats, [(*encode(Heartbeat(far, flow.target, now_ms)), 0)])
    far_flow = load_config(path, connections=False).flow(f"{far}->{flow.target}")
    create_topic(clusters["target"], offset_map_topic(far_flow), 1)
    produce(clusters["target"], offset_map_topic(far_flow), [(*map_record(MapEntry(
        far_flow.name, "earlier", 0, "heartbeats", 0, beats, 0, 0, 1, (Segment(0, 0, 1),),
        now_ms)), 0)])

    home = base / "airflow"
    port = _free_port()
    scrape_token = "scrape-" + secrets.token_hex(16)
    env = _environment(home, port, config.path, scrape_token)
    airflow = str(Path(sys.executable).parent / "airflow")
    migrated = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True,
                              text=True, timeout=300, check=False)
    assert migrated.returncode == 0, migrated.stderr[-4000:]
    log = home / "api-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen([airflow, "api-server"], env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, process, log)
        yield AirflowServer(url, config, topic, scrape_token, log, f"{far}->{flow.target}",
                            missing)
    finally:
        _stop(process)

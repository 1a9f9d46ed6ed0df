"""The warm Spark path: `ferry spark up|status|down` runs a local Spark Connect server, and a
flow whose master is `sc://...` copies through it from the cycle's own process (no
spark-submit, no JVM per cycle), exactly as the spark-submit path does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ferry.local import spark_server
from tests.integration.kafka_data import create_topic, flow_config, produce
from tests.integration.test_lane import assert_exact

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def ferry(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).parent / "ferry"
    env = {**os.environ, **({"FERRY_HOME": str(home)} if home else {})}
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=600,
                          check=False, env=env)


@pytest.fixture(scope="module")
def connect_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A FERRY_HOME whose local Spark Connect server runs for this module's tests."""
    home = tmp_path_factory.mktemp("ferry-home")
    started = ferry("spark", "up", "--json", home=home)
    assert started.returncode == 0, started.stderr[-3000:]
    yield home
    stopped = ferry("spark", "down", "--json", home=home)
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"] is True


def _status(home: Path) -> dict[str, Any]:
    answer = ferry("spark", "status", "--json", home=home)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    return dict(json.loads(answer.stdout))


def test_ferry_spark_up_keeps_a_running_server_and_it_listens_on_loopback_only(
    connect_home: Path
) -> None:
    status = _status(connect_home)
    again = ferry("spark", "up", "--json", home=connect_home)
    assert again.returncode == 0
    assert json.loads(again.stdout)["pid"] == status["pid"]  # kept, not a second server
    server = psutil.Process(status["pid"])
    listening = {(c.laddr.ip, c.laddr.port) for p in [server, *server.children(recursive=True)]
                 for c in p.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    port = int(status["url"].rsplit(":", 1)[1])
    assert any(p == port for _, p in listening)
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for ip, _ in listening), listening


def test_a_cycle_on_the_warm_spark_copies_exactly_through_the_server(
    connect_home: Path, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    # given: a flow whose Spark master is the local Connect server
    url = _status(connect_home)["url"]
    create_topic(clusters["source"], topic_name, 3)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), i % 3)
                                             for i in range(600)])
    config = flow_config(tmp_path, clusters, topic_name, f"ferry.spark.master = {url}\n")
    flow = config.enabled_flows[0]

    # when: two cycles, the second after more records
    first = ferry("mirror", config.path, "--flow", flow.name, "--json")
    produce(clusters["source"], topic_name, [(None, f"w{i}".encode(), i % 3)
                                             for i in range(90)])
    second = ferry("mirror", config.path, "--flow", flow.name, "--json")
    idle = ferry("mirror", config.path, "--flow", flow.name, "--json")

    # then: exact, and the lanes ran inside the server (its log has them), not in a job
    # spark-submit started
    for run in (first, second, idle):
        assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(idle.stdout)["idle"] is True
    assert_exact(flow, clusters, topic_name, 3)
    server = spark_server.load(connect_home / "local" / "spark")
    assert server is not None
    log = Path(server.log).read_text()
    assert f"done [flow={flow.name} lane=" in log
    assert "SparkSubmit" not in first.stderr + second.stderr


def test_a_connect_master_nobody_listens_on_fails_the_cycle_in_one_line(
    clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 1)
    produce(clusters["source"], topic_name, [(None, b"v", 0)])
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = flow_config(tmp_path, clusters, topic_name,
                         f"ferry.spark.master = sc://127.0.0.1:{port}\n")

    failed = ferry("mirror", config.path, "--flow", config.enabled_flows[0].name)

    assert failed.returncode == 1
    assert f"cannot reach the Spark Connect server at sc://127.0.0.1:{port}" in failed.stderr
    assert "Traceback" not in failed.stderr

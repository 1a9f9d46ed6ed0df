"""The copy job runs unchanged on a Spark standalone cluster (master + one worker started
from the pip pyspark install), with the library shipped to the executors."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.kafka_data import create_topic, flow_config, produce
from tests.integration.test_lane import assert_exact
from tests.integration.test_mirror_cli import ferry

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(tmp_path / "work"), "PYSPARK_PYTHON": sys.executable}
    port = _port()
    master_url = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    procs = [subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(_port())], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "master.log", "wb"))]  # noqa: SIM115
    deadline = time.monotonic() + 60
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        assert time.monotonic() < deadline, (tmp_path / "master.log").read_text()[-2000:]
        time.sleep(0.5)
    procs.append(subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.worker.Worker", "--cores", "2", "--memory", "2g",
         "--webui-port", str(_port()), master_url], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb")))  # noqa: SIM115
    while "Successfully registered with master" not in (tmp_path / "worker.log").read_text():
        assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-2000:]
        time.sleep(0.5)
    try:
        yield master_url, tmp_path / "work"
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)


def test_the_copy_job_runs_on_a_standalone_cluster(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, standalone: tuple[str, Path]
) -> None:
    master, work = standalone
    create_topic(clusters["source"], topic_name, 3)
    produce(clusters["source"], topic_name, [(f"k{i}".encode(), f"v{i}".encode(), i % 3)
                                             for i in range(600)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]

    result = ferry("mirror", config.path, "--flow", flow.name, "--master", master)

    assert result.returncode == 0, result.stderr[-3000:]
    assert_exact(flow, clusters, topic_name, 3)
    executor_logs = "".join(p.read_text(errors="replace") for p in work.rglob("stderr"))
    assert "ferry library loaded from" in executor_logs
    assert ".zip/ferry/__init__.py" in executor_logs  # shipped with --py-files

"""The copy job runs unchanged on a Spark standalone cluster (a master and workers started
from the pip pyspark install), with the library shipped to the executors; an executor lost
mid-copy costs nothing: Spark runs its lanes again elsewhere, and the new attempt's writers
fence whatever the lost one's Python workers still write."""

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

from tests.support.cli import ferry
from tests.support.kafka_data import assert_exact, create_topic, flow_config, produce, written

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_standalone(tmp_path: Path, workers: int, cores: int, memory: str
                     ) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A master and `workers` workers of `cores` cores each, registered: the master's URL
    and the processes (master first)."""
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
    deadline = time.monotonic() + 120
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        assert time.monotonic() < deadline, (tmp_path / "master.log").read_text()[-2000:]
        time.sleep(0.5)
    for n in range(workers):
        log = tmp_path / f"worker-{n}.log"
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--cores", str(cores),
             "--memory", memory, "--webui-port", str(_port()), master_url], env=env,
            start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=open(log, "wb")))  # noqa: SIM115
        while "Successfully registered with master" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.5)
    return master_url, procs


def stop_standalone(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One standalone cluster for the module (a master, two workers of one core each): its
    master's URL and the workers' folder, where each executor runs and logs."""
    root = tmp_path_factory.mktemp("standalone")
    master_url, procs = start_standalone(root, workers=2, cores=1, memory="1g")
    try:
        yield master_url, root / "work"
    finally:
        stop_standalone(procs)


@pytest.mark.spark_submit
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


@pytest.mark.spark_submit
def test_an_executor_lost_mid_copy_is_replaced_and_the_copy_stays_exact(
    clusters: dict[str, str], topic_name: str, tmp_path: Path, standalone: tuple[str, Path]
) -> None:
    import psutil

    master, work = standalone
    earlier = set(work.iterdir())  # the applications that ran before this one
    create_topic(clusters["source"], topic_name, 4)
    total = 80_000
    produce(clusters["source"], topic_name,
            [(f"k{i}".encode(), f"value-{i:08d}".encode() * 8, i % 4) for i in range(total)])
    config = flow_config(tmp_path, clusters, topic_name,
                         "ferry.transaction.max.records = 2000\n")
    flow = config.enabled_flows[0]
    remote = flow.remote_topic(topic_name)
    job = subprocess.Popen(
        [str(Path(sys.executable).parent / "ferry"), "mirror", config.path, "--flow",
         flow.name, "--master", master], cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # given the copy running on two executors, when one executor's JVM is SIGKILLed
    # once a tenth of the records is written (its Python workers are left to run on)
    deadline = time.monotonic() + 240
    while written(clusters["target"], remote, 4) < 0.1 * total:
        assert job.poll() is None and time.monotonic() < deadline, job.stderr
        time.sleep(0.05)
    ours = [str(app) for app in set(work.iterdir()) - earlier]  # this job's executors' folders
    executors = [p for p in psutil.process_iter(["cmdline", "cwd"])
                 if "org.apache.spark.executor.CoarseGrainedExecutorBackend"
                 in " ".join(p.info["cmdline"] or [])
                 and (p.info["cwd"] or "").startswith(tuple(ours))]
    assert len(executors) == 2, "the copy should run on both workers' executors"
    executors[0].kill()
    assert written(clusters["target"], remote, 4) < total, "the kill must land mid-copy"
    _, err = job.communicate(timeout=300)

    # then the job succeeds, Spark having run the lost lanes again, and nothing is lost or
    # doubled
    log = err.decode(errors="replace")
    assert job.returncode == 0, log[-3000:]
    assert "Lost executor" in log or "lost executor" in log.lower(), log[-3000:]
    assert_exact(flow, clusters, topic_name, 4)

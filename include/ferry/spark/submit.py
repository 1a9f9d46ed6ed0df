"""The spark-submit command for the copy job, as a plain list (one place builds it; the
DAG's SparkSubmitOperator gets the same application, conf and arguments)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import ferry
from ferry.core.job import Copied
from ferry.spark.library import library_zip

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ferry.config import Flow
    from ferry.config.connections import Connection
    from ferry.core.plan_file import PlanFile
    from ferry.spark.installed import SparkCheck

JOB = "ferry_copy.py"  # not copy.py: the script dir comes first on sys.path and
# would shadow the standard library's `copy` module


def jobs_dir() -> Path:
    """The package's `jobs/` (`ferry/jobs`, installed with it; `$FERRY_JOBS_DIR` to
    override)."""
    if os.environ.get("FERRY_JOBS_DIR"):
        return Path(os.environ["FERRY_JOBS_DIR"])
    return Path(ferry.__file__).resolve().parent / "jobs"


def job_path() -> str:
    return str(jobs_dir() / JOB)


def job_arguments(config_path: str, flow: str, plan_path: str) -> list[str]:
    return ["--config", config_path, "--flow", flow, "--plan", plan_path]


def job_conf() -> dict[str, str]:
    """Spark settings for the job, minus the master (spark-submit's --master decides), the
    jars and the driver's class path and JVM options (`driver_conf`). Spark's own logging is
    cut to warnings so task logs show Ferry's progress lines."""
    from ferry.spark.session import spark_conf

    conf = {k: v for k, v in spark_conf("", jars=False).items() if k != "spark.master"}
    conf["spark.executor.extraJavaOptions"] = _log4j_option()
    return conf


def _log4j_option() -> str:
    return f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}"


def driver_conf() -> tuple[dict[str, str], str | None]:
    """The jars the job ships (`spark.jars`), the driver's class path (the same jars, so
    its class-data archive holds them too) and JVM options, and the partial class-data
    archive its JVM writes: the submitter passes it to `classdata.adopt` once the job
    succeeded (see `ferry.spark.classdata`)."""
    from ferry.spark import classdata
    from ferry.spark.session import delta_classpath

    class_path = delta_classpath()
    options, partial = classdata.driver_java_options(class_path)
    return {"spark.jars": ",".join(class_path),
            "spark.driver.extraClassPath": os.pathsep.join(class_path),
            "spark.driver.extraJavaOptions": f"{_log4j_option()} {options}"}, partial


def submit_command(config_path: str, flow: str, plan_path: str, master: str,
                   spark_submit: str | None = None) -> tuple[list[str], str | None]:
    """The spark-submit command, and the partial class-data archive to adopt after it
    succeeded (None when there is none to adopt)."""
    binary = spark_submit or str(Path(sys.executable).parent / "spark-submit")
    command = [binary, "--master", master, "--name", f"ferry-copy {flow}"]
    driver, partial = driver_conf()
    for key, value in sorted((job_conf() | driver).items()):
        command += ["--conf", f"{key}={value}"]
    command += ["--py-files", library_zip(), job_path(),
                *job_arguments(config_path, flow, plan_path)]
    return command, partial


def submit_env() -> dict[str, str]:
    """The environment spark-submit runs in: this Python for the workers, loopback only,
    and no foreign Spark settings that would switch it to another install or to Connect."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_HOME", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED",
                        "PYSPARK_DRIVER_PYTHON")}
    env["PYSPARK_PYTHON"] = sys.executable
    from ferry.spark.session import driver_host

    env.setdefault("SPARK_LOCAL_IP", driver_host())
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_job(config_path: str, flow: str, plan_path: str, master: str,
            loaded: Flow | None = None,
            connections: Mapping[str, Connection] | None = None) -> int:
    """`run_copy`'s exit code (a backfill's chunks, which record their own runs)."""
    return run_copy(config_path, flow, plan_path, master, None, loaded,
                    connections).exit_code


class KeepsSessions(Protocol):
    """Where a continuous loop's Spark jobs run on a Connect server, its session kept from
    one job to the next (`ferry.spark.connect.ConnectSessions`), and the check of this
    environment's Spark its jobs share (a warning once per loop)."""

    @property
    def check(self) -> SparkCheck: ...

    def run_job(self, config_path: str, flow_name: str, plan_path: str, url: str,
                loaded: Flow | None = None) -> Copied: ...


@dataclass(frozen=True)
class SparkRunner:
    """The copy-runner port (`ferry.steps.ports.CopyRunner`) on Spark: each plan's job on
    `master`, through `run_copy`; the plan read from its file (`reads_plan_file`)."""

    config_path: str
    flow: Flow
    master: str
    sessions: KeepsSessions | None = None
    """A continuous loop's kept Connect sessions (None: each job on a session of its own)."""
    connections: Mapping[str, Connection] | None = None

    reads_plan_file = True
    """The job reads its plan from the file the cycle writes."""

    def run(self, plan: PlanFile, plan_path: str | None = None) -> Copied:
        assert plan_path is not None, "a Spark job reads its plan from a file"
        return run_copy(self.config_path, self.flow.name, plan_path, self.master,
                        self.sessions, self.flow, self.connections)



def run_copy(config_path: str, flow: str, plan_path: str, master: str,
             sessions: KeepsSessions | None = None, loaded: Flow | None = None,
             connections: Mapping[str, Connection] | None = None) -> Copied:
    """Run the copy job for one plan file and wait for it (outside Airflow): through the
    Spark Connect server a `sc://` master names, in this process, else through
    spark-submit (the command Airflow's SparkSubmitOperator runs). Its output goes to
    stderr. Returns the job's exit code and the run as the job recorded it (from the job's
    result file after spark-submit; none when the job left none). `sessions`: a continuous
    loop's kept Connect sessions (`ConnectSessions.run_job`: its session kept for the next
    job); `loaded` spares
    it reading the config again. `connections`: the Airflow connections of the config
    (`Config.connections`), handed to the job in a snapshot beside its plan for as
    long as it runs."""
    from ferry.config.connections import remove_snapshot, write_snapshot

    write_snapshot(plan_path, connections or {})
    try:
        return _run_job(config_path, flow, plan_path, master, sessions, loaded)
    finally:
        remove_snapshot(plan_path)


def _run_job(config_path: str, flow: str, plan_path: str, master: str,
             sessions: KeepsSessions | None, loaded: Flow | None) -> Copied:
    import subprocess

    from ferry.core.job import read_result
    from ferry.errors import TerminalError
    from ferry.spark import installed
    from ferry.spark.connect import is_connect, run_connect_job

    (sessions.check if sessions is not None else installed.SparkCheck()).require(
        master, is_connect(master))
    if is_connect(master):
        if sessions is not None:
            return sessions.run_job(config_path, flow, plan_path, master, loaded)
        return run_connect_job(config_path, flow, plan_path, master, loaded)

    from ferry.spark import classdata

    command, partial = submit_command(config_path, flow, plan_path, master)
    try:
        code = subprocess.run(command, env=submit_env(), stdout=sys.stderr,
                              check=False).returncode
    except FileNotFoundError:
        raise TerminalError(f"cannot run {command[0]}: is pyspark installed in this "
                            f"environment? ({installed.SPARK_EXTRA})") from None
    if code == 0:
        classdata.adopt(partial)
    return Copied(code, read_result(plan_path))

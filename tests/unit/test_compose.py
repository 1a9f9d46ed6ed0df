"""docker-compose.yaml, deploy/Dockerfile and examples/compose.properties, read as the
deployment's specification: which services make it up, one image for everything that runs
Ferry's code, the config mounted read-only where FERRY_CONFIG points, the Spark master the
connection and the config name, the state volume Airflow and the Spark worker share, the
Kafka addresses, and the pinned lock in the image.

No Docker engine is needed and no process starts: the files are parsed, and variables take
their defaults (the values `docker compose up` uses without a .env file). `docker compose
config`'s own check of the file runs a program, so it is in
tests/integration/test_compose_config.py."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ferry.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
EXAMPLE = ROOT / "examples" / "compose.properties"

AIRFLOW = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
           "airflow-triggerer")
SPARK = ("spark-master", "spark-worker", "spark-connect")
FERRY_SERVICES = ("airflow-init", *AIRFLOW, *SPARK)
"""The services that run Ferry's code (or the Spark that runs it)."""
TASK_RUNNER = "airflow-scheduler"
"""Where the tasks run under LocalExecutor, hence the copy job's spark-submit driver."""

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_]\w*)(?::?-(?P<default>[^}]*))?\}")


def _interpolate(value: Any) -> Any:
    """Compose's `${VAR:-default}` with every variable unset; a variable without a default
    fails (the file must run with `docker compose up` and no .env)."""
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    if not isinstance(value, str):
        return value

    def default(match: re.Match[str]) -> str:
        assert match["default"] is not None, f"${{{match['name']}}} has no default"
        return match["default"]

    return _VARIABLE.sub(default, value.replace("$$", "\0")).replace("\0", "$")


@cache
def compose() -> dict[str, Any]:
    data: dict[str, Any] = _interpolate(yaml.safe_load(COMPOSE.read_text()))
    return data


def service(name: str) -> dict[str, Any]:
    services: dict[str, dict[str, Any]] = compose()["services"]
    return services[name]


def env(name: str) -> dict[str, str]:
    environment = service(name).get("environment", {})
    assert isinstance(environment, Mapping), f"{name}: environment must be a mapping"
    return {k: str(v) for k, v in environment.items()}


@dataclass(frozen=True)
class Mount:
    source: str
    target: PurePosixPath
    read_only: bool

    @property
    def named_volume(self) -> bool:
        return not self.source.startswith((".", "/", "~"))


def mounts(name: str) -> list[Mount]:
    """The service's volumes (short syntax `source:target[:ro]`)."""
    result = []
    for spec in service(name).get("volumes", []):
        source, target, *mode = spec.split(":")
        result.append(Mount(source, PurePosixPath(target), mode == ["ro"]))
    return result


def mount_of(name: str, path: str) -> Mount:
    """The mount that holds `path` in the service (the deepest one)."""
    holding = [m for m in mounts(name) if PurePosixPath(path).is_relative_to(m.target)]
    assert holding, f"{name}: nothing mounted at {path}"
    return max(holding, key=lambda m: len(m.target.parts))


@cache
def example() -> Config:
    return load_config(EXAMPLE, env={})


def dockerfile_instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    lines = [line for line in DOCKERFILE.read_text().splitlines()
             if not line.lstrip().startswith("#")]
    return [" ".join(i.split()) for i in re.split(r"\n(?=\S)", "\n".join(lines).replace(
        "\\\n", " ")) if i.strip()]


def dockerfile_env(stage: int) -> dict[str, str]:
    """ENV of the Dockerfile's stage (0 = the first FROM)."""
    stages: list[dict[str, str]] = []
    for instruction in dockerfile_instructions():
        keyword, _, rest = instruction.partition(" ")
        if keyword == "FROM":
            stages.append({})
        elif keyword == "ENV":
            stages[-1].update(token.partition("=")[::2] for token in shlex.split(rest))
    return stages[stage]


def lock() -> dict[str, str]:
    """requirements.txt: normalized name -> pinned version."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("#")[0].strip().split("==")
            pins[_normalize(name)] = version
    return pins


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()


def test_the_deployment_runs_airflow_spark_and_two_kafka_clusters() -> None:
    assert set(compose()["services"]) == {
        "kafka-source", "kafka-target", "postgres", "airflow-init", *AIRFLOW, *SPARK}


def test_kafka_runs_apache_kafka_4_in_kraft_mode_with_distinct_cluster_ids() -> None:
    ids = set()
    for name in ("kafka-source", "kafka-target"):
        image, _, tag = service(name)["image"].partition(":")
        assert image == "apache/kafka" and tag.startswith("4."), service(name)["image"]
        assert env(name)["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert mount_of(name, env(name)["KAFKA_LOG_DIRS"]).named_volume  # data survives
        ids.add(env(name)["CLUSTER_ID"])
    assert len(ids) == 2


def test_every_service_that_runs_ferry_code_uses_the_image_built_from_the_dockerfile() -> None:
    images = set()
    for name in FERRY_SERVICES:
        build = service(name)["build"]
        assert (ROOT / build["context"]).resolve() == ROOT, name
        assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE, name
        images.add(service(name)["image"])
    assert len(images) == 1  # one tag: Airflow and Spark run the same Python, pyspark, Spark
    for name in set(compose()["services"]) - set(FERRY_SERVICES):
        assert "build" not in service(name) and not service(name)["image"].endswith(
            ":latest"), name


def test_spark_runs_the_images_pip_pyspark_master_and_worker() -> None:
    assert service("spark-master")["command"][:2] == [
        "spark-class", "org.apache.spark.deploy.master.Master"]
    assert service("spark-worker")["command"][:2] == [
        "spark-class", "org.apache.spark.deploy.worker.Worker"]


def test_the_warm_spark_serves_spark_connect_where_the_tasks_reach_it_on_loopback() -> None:
    from ferry.cli.main import build_parser

    command = service("spark-connect")["command"]
    args = build_parser().parse_args(command[1:])  # a real `ferry` command line
    assert (args.command, args.spark_command) == ("spark", "serve")
    assert (args.host, args.port) == ("127.0.0.1", 15002)
    worker = service("spark-worker")["command"]
    assert args.master == worker[-1]  # the standalone master the worker joins
    # the tasks run in the scheduler: the server shares its network namespace
    assert service("spark-connect")["network_mode"] == f"service:{TASK_RUNNER}"
    state = example().flow("source->target").ferry.state_dir
    assert mount_of("spark-connect", state) == mount_of(TASK_RUNNER, state)
    assert env("spark-connect")["FERRY_CONFIG"] == env(TASK_RUNNER)["FERRY_CONFIG"]


def test_airflow_runs_its_components_with_the_local_executor_on_postgres() -> None:
    commands = {name: service(name)["command"][:2] for name in AIRFLOW}
    assert commands == {"airflow-apiserver": ["airflow", "api-server"],
                        "airflow-scheduler": ["airflow", "scheduler"],
                        "airflow-dag-processor": ["airflow", "dag-processor"],
                        "airflow-triggerer": ["airflow", "triggerer"]}
    for name in ("airflow-init", *AIRFLOW):
        assert env(name)["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        database = env(name)["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert re.fullmatch(r"postgresql\+psycopg2://\w+:[^@]+@postgres:5432/\w+", database)
    for name in AIRFLOW:
        assert service(name)["depends_on"]["airflow-init"] == {
            "condition": "service_completed_successfully"}, name
    assert service("airflow-init")["command"] == ["airflow-init"]
    assert "airflow db migrate" in (ROOT / "deploy" / "airflow-init.sh").read_text()


def test_every_airflow_component_reads_the_secrets_airflow_init_generates() -> None:
    script = (ROOT / "deploy" / "airflow-init.sh").read_text()
    generated = set(re.findall(r"^write_once (\w+) ", script, re.MULTILINE))
    for name in ("airflow-init", *AIRFLOW):
        commands = {k: v for k, v in env(name).items() if k.endswith("_CMD")}
        assert {k.removesuffix("_CMD") for k in commands} == {
            "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY",
            "AIRFLOW__CORE__FERNET_KEY"}, name
        for command in commands.values():
            program, path = shlex.split(command)
            assert program == "cat" and PurePosixPath(path).name in generated, command
            secrets = mount_of(name, path)
            assert secrets.named_volume and secrets.source == "airflow-secrets", name


def test_the_config_is_mounted_read_only_where_FERRY_CONFIG_points() -> None:
    path = env("airflow-scheduler")["FERRY_CONFIG"]
    # The executors load the config themselves, from the driver's path: the worker too.
    for name in (*AIRFLOW, "spark-worker"):
        assert env(name)["FERRY_CONFIG"] == path, name
        config = mount_of(name, path)
        assert config.read_only and not config.named_volume, name
        host_file = ROOT / config.source / PurePosixPath(path).relative_to(config.target)
        assert host_file.resolve() == EXAMPLE, name


def test_examples_compose_properties_passes_ferrys_validation() -> None:
    config = example()
    assert [f.name for f in config.enabled_flows] == ["source->target"]
    assert config.warnings == ()
    flow = config.flow("source->target")
    # single-node clusters: a replication factor above 1 would fail every topic creation
    assert (flow.replication_factor, flow.checkpoints_replication_factor,
            flow.heartbeats_replication_factor) == (1, 1, 1)


def test_the_spark_connection_and_the_config_name_the_master_service() -> None:
    command = service("spark-master")["command"]
    host, port = command[command.index("--host") + 1], command[command.index("--port") + 1]
    assert host == "spark-master" == service("spark-master")["hostname"]
    master = f"spark://{host}:{port}"
    for name in AIRFLOW:
        connection = json.loads(env(name)["AIRFLOW_CONN_SPARK_DEFAULT"])
        # the provider's hook uses the host as the master when no port is set
        assert connection == {"conn_type": "spark", "host": master}, name
    assert service("spark-worker")["command"][-1] == master
    assert example().flow("source->target").ferry.spark_master == master


def test_the_spark_worker_reaches_the_driver_where_the_tasks_run() -> None:
    from ferry.spark.session import spark_conf

    driver_host = spark_conf("spark://spark-master:7077", jars=False)["spark.driver.host"]
    assert env(TASK_RUNNER)["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    if driver_host in ("127.0.0.1", "localhost"):
        # the driver listens on loopback: executors must share its network namespace
        assert service("spark-worker")["network_mode"] == f"service:{TASK_RUNNER}"
        command = service("spark-worker")["command"]
        assert command[command.index("--host") + 1] == service(TASK_RUNNER)["hostname"]


def test_the_state_dir_is_one_volume_shared_by_airflow_and_the_spark_worker() -> None:
    state = example().flow("source->target").ferry.state_dir
    assert PurePosixPath(state).is_absolute()  # not relative to the mounted config
    shared = {mount_of(name, state) for name in (*AIRFLOW, "spark-worker")}
    assert len(shared) == 1
    volume = shared.pop()
    assert volume.named_volume and not volume.read_only
    assert volume.source in compose()["volumes"]


def test_kafka_bootstrap_servers_name_the_compose_services_and_ports() -> None:
    for cluster in example().clusters.values():
        for server in cluster.bootstrap_servers.split(","):
            host, port = server.strip().rsplit(":", 1)
            advertised = env(host)["KAFKA_ADVERTISED_LISTENERS"].split(",")
            listener = next(a.split("://")[0] for a in advertised
                            if a.split("://")[1] == f"{host}:{port}")
            assert f"{listener}://:{port}" in env(host)["KAFKA_LISTENERS"].split(",")


def test_each_kafka_cluster_is_reachable_from_the_host_on_its_published_port() -> None:
    ports = set()
    for name in ("kafka-source", "kafka-target"):
        advertised = env(name)["KAFKA_ADVERTISED_LISTENERS"].split(",")
        port = next(a.rsplit(":", 1)[1] for a in advertised if a.startswith("HOST://localhost:"))
        assert f"{port}:{port}" in service(name)["ports"], name
        assert f"HOST://:{port}" in env(name)["KAFKA_LISTENERS"].split(","), name
        ports.add(port)
    assert len(ports) == 2


def test_the_image_installs_the_runtime_at_the_locks_versions_and_nothing_that_moves_it(
) -> None:
    runs = " ".join(i for i in dockerfile_instructions() if i.startswith("RUN "))
    assert ("pip install -c requirements.txt -r requirements-runtime.txt "
            "-r requirements-deploy.txt") in runs
    assert "pip install -r requirements.txt" not in runs  # not the lock's development tools
    assert "pip install --no-deps ." in runs
    assert "ferry local jars" in runs
    extras = (ROOT / "deploy" / "requirements-deploy.txt").read_text()
    pinned = lock()
    assert {"pyspark", "apache-airflow", "delta-spark"} <= set(pinned)
    for text in (runs, extras):
        for name, version in re.findall(r"([A-Za-z0-9][\w.\-\[\]]*)==([\w.]+)", text):
            if _normalize(name) in pinned:
                assert pinned[_normalize(name)] == version, f"{name}=={version} vs the lock"
    # Java 17 in both stages: Maven fetches the jars, Spark 4 runs on it.
    assert runs.count("openjdk-17-") == 2


def test_the_image_finds_the_jobs_jars_and_library_zip_where_ferry_looks() -> None:
    from ferry.spark.submit import JOB, jobs_dir

    build, runtime = dockerfile_env(0), dockerfile_env(1)
    assert build["FERRY_CACHE_DIR"] == runtime["FERRY_CACHE_DIR"]  # jars + zip built there
    # the job comes with the installed package; the DAG file is written from it
    assert "FERRY_JOBS_DIR" not in runtime and (jobs_dir() / JOB).is_file()
    assert "pip install --no-deps ." in " ".join(dockerfile_instructions())
    assert "RUN ferry dag-file --write /opt/airflow/dags" in dockerfile_instructions()
    assert runtime["AIRFLOW_HOME"] == "/opt/airflow"
    assert runtime["PYSPARK_PYTHON"].startswith(runtime["PATH"].split(":")[0])


def test_every_long_running_service_says_whether_it_is_healthy() -> None:
    # a service without a healthcheck is "running" to compose (and to whatever waits on
    # it) however broken; only a one-shot service (restart "no") may go without
    long_running = [name for name, found in compose()["services"].items()
                    if found.get("restart", "unless-stopped") != "no"]
    assert long_running, "no long-running service found"
    assert [name for name in long_running if "healthcheck" not in service(name)] == []


def test_the_warm_spark_leaves_the_workers_cores_to_the_spark_submit_copies() -> None:
    # the default copy is spark-submit on the standalone master, beside the warm server:
    # a server with no core limit takes every core and the copies wait for ever
    from ferry.cli.main import build_parser

    args = build_parser().parse_args(service("spark-connect")["command"][1:])
    workers = int(env("spark-worker")["SPARK_WORKER_CORES"])
    assert args.max_cores is not None and 1 <= args.max_cores < workers


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_normalize(re.split(r"[\[<>=!~; ]", r.strip(), maxsplit=1)[0])
            for r in requirements if r.strip() and not r.strip().startswith("#")}


def test_the_images_runtime_is_ferrys_dependencies_and_extras_and_no_development_tool() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _requirement_names([*project["dependencies"],
                                 *project["optional-dependencies"]["spark"],
                                 *project["optional-dependencies"]["airflow"]])
    runtime = (ROOT / "deploy" / "requirements-runtime.txt").read_text().splitlines()
    assert _requirement_names(runtime) == wanted
    dev = _requirement_names(project["optional-dependencies"]["dev"])
    assert not dev & _requirement_names(runtime)
    assert set(lock()) >= wanted  # each at a version the lock pins

"""deploy/kubernetes/, read as the deployment's specification: Ferry's long-running parts
(the metrics server the PodMonitor scrapes, the Spark Connect server, a continuous loop run
without Airflow) and the values for Airflow's official Helm chart agree on names, ports,
labels, secrets, mounts, the config and the image. No cluster is needed and nothing runs:
the files are parsed, and each `ferry` command line through the CLI's own parser."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from ferry.config import load_config

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
CONFIG_PATH = "/etc/ferry/mm2.properties"


@cache
def documents() -> tuple[dict[str, Any], ...]:
    found: list[dict[str, Any]] = []
    for path in sorted(KUBE.glob("ferry-*.yaml")):
        found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return tuple(found)


def of_kind(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in documents()
                if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def pod(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = of_kind("Deployment", name)["spec"]["template"]
    return spec


def container(name: str) -> dict[str, Any]:
    (only,) = pod(name)["spec"]["containers"]
    found: dict[str, Any] = only
    return found


def mounts(name: str) -> dict[str, str]:
    """mount path -> what is mounted there ("configMap:NAME" or "pvc:NAME")."""
    volumes = {v["name"]: v for v in pod(name)["spec"]["volumes"]}
    return {m["mountPath"]: _source(volumes[m["name"]]) for m in container(name)["volumeMounts"]}


def _source(volume: dict[str, Any]) -> str:
    if "configMap" in volume:
        return f"configMap:{volume['configMap']['name']}"
    return f"pvc:{volume['persistentVolumeClaim']['claimName']}"



FERRY_PARTS = ("ferry-metrics", "ferry-spark-connect", "ferry-mirror")


@pytest.fixture
def the_config(tmp_path: Path) -> Any:
    path = tmp_path / "mm2.properties"
    path.write_text(of_kind("ConfigMap", "ferry-config")["data"]["mm2.properties"])
    return load_config(path)


@pytest.mark.parametrize("name", FERRY_PARTS)
def test_each_part_runs_a_real_ferry_command_on_the_mounted_config_and_state(
    name: str, the_config: Any
) -> None:
    from ferry.cli.main import build_parser

    command = container(name)["command"]
    assert command[0] == "ferry"
    args = build_parser().parse_args(command[1:])
    if hasattr(args, "config") and args.config:
        assert args.config == CONFIG_PATH
    env = {e["name"]: e.get("value") for e in container(name)["env"]}
    assert env["FERRY_CONFIG"] == CONFIG_PATH
    found = mounts(name)
    assert found[str(Path(CONFIG_PATH).parent)] == "configMap:ferry-config"
    state = {f.ferry.state_dir for f in the_config.enabled_flows}
    assert state == {"/opt/ferry/state"} and found["/opt/ferry/state"] == "pvc:ferry-state"
    assert container(name)["image"] == container("ferry-metrics")["image"]


def test_the_podmonitor_scrapes_the_metrics_pods_port_with_the_token_they_check() -> None:
    monitor = of_kind("PodMonitor", "ferry")["spec"]
    labels = pod("ferry-metrics")["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for p in container("ferry-metrics")["ports"]}
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    serve = container("ferry-metrics")["command"]
    assert serve[serve.index("--serve") + 1].endswith(f":{ports[endpoint['port']]}")
    token = {e["name"]: e for e in container("ferry-metrics")["env"]}["FERRY_METRICS_TOKEN"]
    secret = token["valueFrom"]["secretKeyRef"]
    assert (secret["name"], secret["key"]) == (endpoint["authorization"]["credentials"]["name"],
                                               endpoint["authorization"]["credentials"]["key"])


def test_the_copies_reach_the_spark_connect_server_through_its_service(the_config: Any) -> None:
    service = of_kind("Service", "ferry-spark-connect")["spec"]
    assert service["selector"].items() <= pod("ferry-spark-connect")["metadata"]["labels"].items()
    (port,) = service["ports"]
    container_ports = {p["name"]: p["containerPort"]
                       for p in container("ferry-spark-connect")["ports"]}
    assert container_ports[port["targetPort"]] == port["port"]
    serve = container("ferry-spark-connect")["command"]
    assert int(serve[serve.index("--port") + 1]) == port["port"]
    url = f"sc://ferry-spark-connect:{port['port']}"
    assert {f.ferry.spark_master for f in the_config.enabled_flows} == {url}
    values = yaml.safe_load((KUBE / "airflow-values.yaml").read_text())
    conn = {e["name"]: e["value"] for e in values["env"]}["AIRFLOW_CONN_SPARK_DEFAULT"]
    assert yaml.safe_load(conn) == {"conn_type": "spark_connect",
                                    "host": "ferry-spark-connect", "port": port["port"]}


def test_airflows_chart_runs_ferrys_image_with_the_same_config_and_state_at_the_same_paths(
) -> None:
    values = yaml.safe_load((KUBE / "airflow-values.yaml").read_text())
    image = f"{values['images']['airflow']['repository']}:{values['images']['airflow']['tag']}"
    assert image == container("ferry-metrics")["image"]
    env = {e["name"]: e["value"] for e in values["env"]}
    assert env["FERRY_CONFIG"] == CONFIG_PATH
    volumes = {v["name"]: _source(v) for v in values["volumes"]}
    chart_mounts = {m["mountPath"]: volumes[m["name"]] for m in values["volumeMounts"]}
    for path, source in mounts("ferry-metrics").items():
        assert chart_mounts[path] == source


def test_the_state_volume_can_be_shared_by_pods_on_several_nodes() -> None:
    claim = of_kind("PersistentVolumeClaim", "ferry-state")["spec"]
    assert claim["accessModes"] == ["ReadWriteMany"]

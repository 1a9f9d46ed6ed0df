"""Ferry installs into an Airflow like any provider: the wheel, built from this repo, goes
into a clean virtualenv with Airflow (`ferry-mirror[airflow]`, the lock as constraints), and
from a folder outside the checkout, with nothing of it on the path (the virtualenv is made
before the suite, `tests.support.installs`, and gets the checkout's wheel):

- `ferry` runs, and finds the copy job inside the installed package;
- `ferry dag-file` gives the DAG folder its file, and `airflow dags list` shows the flow's
  DAG (and an unset FERRY_CONFIG is one import error saying so);
- `airflow plugins` shows the Ferry plugin, and `airflow providers` the provider with its
  connection type;
- Airflow gets the Spark Connect client and not Spark: a worker copies on a Connect server,
  and a copy on spark-submit there is one line naming the `spark` extra.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.installs import prepared_provider
from tests.support.kafka_data import assert_exact, create_topic, flow_config, produce
from tests.support.wheel import clean_env, last_json

CONFIG = """
clusters = A, B
A.bootstrap.servers = a.example.com:9092
B.bootstrap.servers = b.example.com:9092
A->B.enabled = true
A->B.topics = orders.*
ferry.state.dir = {state}
"""

pytestmark = pytest.mark.integration


@dataclass
class Installed:
    venv: Path
    home: Path
    work: Path
    env: dict[str, str]

    def run(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(self.venv / "bin" / args[0]), *args[1:]], cwd=self.work,
                              env=self.env | env, capture_output=True, text=True, timeout=600,
                              check=False)
        if check:
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done


def json_out(done: subprocess.CompletedProcess[str]) -> Any:
    return last_json(done.stdout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    venv = prepared_provider(root)  # installed by the test command before the suite
    home, work = root / "airflow", root / "work"
    (home / "dags").mkdir(parents=True)
    work.mkdir()
    (work / "mm2.properties").write_text(CONFIG.format(state=root / "state"))
    env = clean_env(venv, AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
                    AIRFLOW__CORE__LOAD_EXAMPLES="False",
                    FERRY_CONFIG=str(work / "mm2.properties"))
    yield Installed(venv, home, work, env)


def test_the_installed_cli_runs_from_the_package_not_the_checkout(installed: Installed) -> None:
    where = installed.run("python", "-c", "import ferry, ferry.spark.submit as s; "
                          "print(ferry.__file__); print(s.job_path())").stdout.split()
    site = str(installed.venv / "lib")
    assert all(path.startswith(site) for path in where), where
    assert Path(where[1]).is_file() and where[1].endswith("ferry/jobs/ferry_copy.py")
    validated = json.loads(installed.run("ferry", "validate", "--json").stdout)
    assert [f["name"] for f in validated["flows"]] == ["A->B"]
    # the alert rules and the runbook they link to ship inside the package
    rules = json.loads(installed.run("ferry", "rules", "--json").stdout)
    assert 'runbook_url: "http://localhost:8080/ferry/runbook#ferryflowdown"' in rules["text"]
    page = installed.run("python", "-c", "from ferry.observe.runbook import render_runbook; "
                         "print(render_runbook())").stdout
    assert '<h2 id="ferryexporterdown">' in page


def test_airflow_gets_the_spark_connect_client_and_not_spark(installed: Installed) -> None:
    found = json.loads(installed.run("python", "-c", (
        "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower()"
        ".replace('_', '-'): d.version for d in m.distributions()}))")).stdout)
    assert "pyspark" not in found  # 450 MB of Spark no Airflow component runs
    assert found["pyspark-client"].startswith("4.2.")
    site = next(installed.venv.glob("lib/python*/site-packages"))
    megabytes = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) // 2**20
    print(f"ferry-mirror[airflow]: {megabytes} MB in site-packages")


@pytest.mark.spark
def test_an_airflow_worker_copies_on_a_spark_connect_server_and_names_the_extra_for_spark_submit(
    installed: Installed, clusters: dict[str, str], connect_url: str, topic_name: str,
    tmp_path: Path
) -> None:
    create_topic(clusters["source"], topic_name, 2)
    produce(clusters["source"], topic_name,
            [(f"k{i}".encode(), f"v{i}".encode(), i % 2) for i in range(300)])
    # (Spark's copies: a plan this small would go to the local runner by default)
    config = flow_config(tmp_path, clusters, topic_name, "ferry.copy.runner = spark\n")
    flow = config.enabled_flows[0]
    # given the Airflow install (no pyspark), a copy on a local master names the extra
    refused = installed.run("ferry", "mirror", config.path, "--flow", flow.name, "--master",
                            "local[1]", check=False)
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        "ferry: master local[1] runs the copy job through spark-submit, which comes with "
        "pyspark, not installed here: pip install 'ferry-mirror[spark]' (or copy on a Spark "
        "Connect server: a master sc://HOST:15002)")
    # and on a Spark Connect server, with Ferry shipped from this install, it copies exactly
    done = installed.run("ferry", "mirror", config.path, "--flow", flow.name, "--master",
                         connect_url, "--json")
    assert json.loads(done.stdout)["idle"] is False
    assert_exact(flow, clusters, topic_name, 2)


def test_the_package_is_ferry_mirror_under_apache_2_with_its_metadata_and_type_hints(
    installed: Installed
) -> None:
    found = json.loads(installed.run("python", "-c", """if True:
        import importlib.metadata as m, json, pathlib, ferry
        d = m.distribution("ferry-mirror")
        print(json.dumps({
            "licence": d.metadata["License-Expression"],
            "licence_file": [str(f) for f in d.files if f.name == "LICENSE"],
            "classifiers": d.metadata.get_all("Classifier"),
            "readme": d.metadata["Description-Content-Type"],
            "summary": d.metadata["Summary"],
            "typed": (pathlib.Path(ferry.__file__).parent / "py.typed").is_file(),
            "requires": d.requires}))""").stdout)
    assert found["licence"] == "Apache-2.0" and found["licence_file"]
    licence = installed.venv.glob("lib/python*/site-packages/" + found["licence_file"][0])
    assert "Apache License" in next(licence).read_text()
    assert "Framework :: Apache Airflow :: Provider" in found["classifiers"]
    assert found["readme"] == "text/markdown" and "MirrorMaker 2" in found["summary"]
    assert found["typed"]
    assert not any(r.startswith("pandas") for r in found["requires"])


def test_airflow_lists_the_flows_dag_the_plugin_and_the_provider(installed: Installed) -> None:
    written = json.loads(installed.run("ferry", "dag-file", "--write",
                                       str(installed.home / "dags"), "--json").stdout)
    assert written["written"] == str(installed.home / "dags" / "ferry_flows.py")
    assert written["source"].startswith(str(installed.venv / "lib"))
    installed.run("airflow", "db", "migrate")
    installed.run("airflow", "dags", "reserialize")

    dags = {d["dag_id"] for d in json_out(installed.run("airflow", "dags", "list", "-o",
                                                        "json"))}
    assert {"ferry_A_to_B", "ferry_backfill", "ferry_verify", "ferry_maintenance"} <= dags

    plugins = json_out(installed.run("airflow", "plugins", "-o", "json"))
    (ferry,) = [p for p in plugins if p["name"] == "ferry"]
    assert "airflow.plugins" in ferry["source"]  # from the entry point: no plugins folder
    assert [a["url_prefix"] for a in ferry["fastapi_apps"]] == ["/ferry"]

    providers = json_out(installed.run("airflow", "providers", "list", "-o", "json"))
    assert "ferry-mirror" in {p["package_name"] for p in providers}
    hooks = json_out(installed.run("airflow", "providers", "hooks", "-o", "json"))
    assert any(h.get("connection_type") == "ferry_kafka" for h in
               (hooks.values() if isinstance(hooks, dict) else hooks))


def test_without_ferry_config_the_dag_file_is_one_import_error_naming_it(
        installed: Installed) -> None:
    env = {k: v for k, v in installed.env.items() if k != "FERRY_CONFIG"}
    done = subprocess.run([str(installed.venv / "bin" / "airflow"), "dags",
                           "list-import-errors", "-l", "-o", "json"], cwd=installed.work,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    errors = json_out(done)
    assert [e["filepath"].rsplit("/", 1)[-1] for e in errors] == ["ferry_flows.py"]
    assert "FERRY_CONFIG: is not set, so Ferry has no config; set FERRY_CONFIG=" in \
        errors[0]["error"]

"""The package's dependency ranges hold at both ends: `ferry-mirror[spark,airflow]` (the
copy job's side and Airflow's) is installed into a clean virtualenv once at the lowest
version each direct requirement admits and once at the newest the index has. Each mirrors
a topic exactly on the session's brokers through its own spark-submit, and its Airflow
lists the flow's DAGs, the plugin and the provider.

The repo's lock (requirements.txt), which the rest of the suite runs on, is a third point
inside the ranges."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from tests.support.installs import ENDS, Ends, canonical, prepared
from tests.support.kafka_data import assert_exact, create_topic, flow_config, produce
from tests.support.wheel import clean_env, last_json

pytestmark = pytest.mark.integration

PARTITIONS = 2


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Ends:
    """Both ends with the checkout's wheel in them (`tests.support.installs`: those the test
    command installed before the suite, else installed now)."""
    return prepared(tmp_path_factory.mktemp("ranges"))


@pytest.mark.spark
@pytest.mark.spark_submit
@pytest.mark.parametrize("end", ENDS)
def test_the_spark_side_mirrors_exactly_at_both_ends_of_the_declared_ranges(
    end: str, venvs: Ends, clusters: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    venv, pins = venvs.venv(end), venvs.pins
    found = json.loads(subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m, json; print("
         "json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version "
         "for d in m.distributions()}))"],
        capture_output=True, text=True, check=True).stdout)
    site = next(venv.glob("lib/python*/site-packages"))
    megabytes = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) // 2**20
    print(end, {name: found.get(canonical(name)) for name in pins}, f"{megabytes} MB")
    if end == "lowest":
        assert {n: Version(found[canonical(n)]) for n in pins} == \
            {n: Version(v) for n, v in pins.items()}

    # given records on the source, when the installed `ferry mirror` copies them on a local
    # master through the venv's own spark-submit
    create_topic(clusters["source"], topic_name, PARTITIONS)
    produce(clusters["source"], topic_name,
            [(f"k{i}".encode(), f"v{i}".encode(), i % PARTITIONS) for i in range(400)])
    config = flow_config(tmp_path, clusters, topic_name)
    flow = config.enabled_flows[0]
    cache = tmp_path / "cache"  # this Spark's class-data archive apart from the suite's
    cache.mkdir()
    (cache / "jars").symlink_to(_jars())
    home = tmp_path / "airflow"
    env = clean_env(venv, FERRY_CACHE_DIR=str(cache), FERRY_CONFIG=config.path,
                    AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
                    AIRFLOW__CORE__LOAD_EXAMPLES="False")

    def run(*args: str) -> str:
        # a command's time follows the machine's: with the suite held to CI's pace, this
        # test's commands took 490 s together
        done = subprocess.run([str(venv / "bin" / args[0]), *args[1:]], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=1200, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout

    mirrored = json.loads(run("ferry", "mirror", config.path, "--flow", flow.name,
                              "--master", "local[1]", "--json"))
    assert mirrored["idle"] is False
    # then every record is on the target once, in order, with its offset map
    assert_exact(flow, clusters, topic_name, PARTITIONS)
    # and that Airflow takes the flow's DAG, the plugin and the provider
    (home / "dags").mkdir(parents=True)
    run("ferry", "dag-file", "--write", str(home / "dags"))
    run("airflow", "db", "migrate")
    run("airflow", "dags", "reserialize")
    assert flow.dag_id in {d["dag_id"] for d in last_json(run("airflow", "dags", "list", "-o",
                                                                "json"))}
    assert "ferry" in {p["name"] for p in last_json(run("airflow", "plugins", "-o", "json"))}
    assert "ferry-mirror" in {p["package_name"] for p in
                              last_json(run("airflow", "providers", "list", "-o", "json"))}


def _jars() -> Path:
    """The Delta jars the suite's set-up fetched (this test fetches nothing)."""
    from ferry.jars import cache_dir

    jars = Path(os.environ.get("FERRY_CACHE_DIR") or cache_dir()) / "jars"
    assert jars.is_dir(), f"{jars}: the Delta jars are not fetched (scripts/setup.sh does)"
    return jars

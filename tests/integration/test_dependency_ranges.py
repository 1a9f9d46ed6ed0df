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
import sys
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.kafka_data import assert_exact, create_topic, flow_config, produce
from tests.support.wheel import build_wheel, clean_env, install_fast, last_json

pytestmark = pytest.mark.integration

EXTRAS = ("spark", "airflow")
PARTITIONS = 2


def direct(requires: list[str], extras: tuple[str, ...]) -> list[Requirement]:
    """The package's direct requirements and those of `extras`; one without a lower bound
    fails the test, as a range whose low end cannot be tested."""
    found = []
    for line in requires:
        requirement = Requirement(line)
        if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": e}) for e in extras):
            continue
        assert any(s.operator in (">=", "==") for s in requirement.specifier), \
            f"{requirement.name} has no lower bound in the package's metadata"
        requirement.marker = None
        found.append(requirement)
    return found


def lowest(requirements: list[Requirement], folder: Path) -> tuple[Path, dict[str, str]]:
    """The lowest version of each direct requirement that the whole set admits (uv's
    `lowest-direct` resolution: a floor another requirement raises is raised, as PyYAML's
    by Airflow's), the rest resolved as pip would: a constraints file, and the direct
    requirements' versions in it."""
    given, pins = folder / "direct.in", folder / "lowest.txt"
    given.write_text("".join(f"{r}\n" for r in requirements))
    subprocess.run([str(Path(sys.executable).parent / "uv"), "pip", "compile", "--quiet",
                    "--no-header", "--resolution", "lowest-direct", "--python-version",
                    f"{sys.version_info.major}.{sys.version_info.minor}", str(given),
                    "-o", str(pins)], check=True, timeout=600)
    chosen = dict(line.split("==", 1) for line in pins.read_text().splitlines()
                  if "==" in line and not line.startswith((" ", "#")))
    names = {canonical(r.name) for r in requirements}
    return pins, {name: version.strip() for name, version in chosen.items()
                  if canonical(name) in names}


def canonical(name: str) -> str:
    return name.lower().replace("_", "-")


ENDS = ("lowest", "newest")
Installed = tuple[Path, dict[str, str]]
"""A virtualenv, and the lowest version of each direct requirement."""


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Installed]]:
    """Per end: a virtualenv with the package installed there, and the direct requirements'
    lowest versions. Both are installed at once (mostly downloads and unpacking)."""
    root = tmp_path_factory.mktemp("ranges")
    wheel = build_wheel(root)
    constraints, pins = lowest(direct(metadata_requires(wheel), EXTRAS), root)
    requirement = f"ferry-mirror[{','.join(EXTRAS)}] @ {wheel.as_uri()}"
    with ThreadPoolExecutor(len(ENDS)) as pool:
        done = {end: pool.submit(install_fast, root / end, requirement,
                                 *(["-c", str(constraints)] if end == "lowest" else []))
                for end in ENDS}
    for future in done.values():
        future.result()
    yield {end: (root / end, pins) for end in ENDS}


def metadata_requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]


@pytest.mark.spark
@pytest.mark.parametrize("end", ENDS)
def test_the_spark_side_mirrors_exactly_at_both_ends_of_the_declared_ranges(
    end: str, venvs: dict[str, Installed], clusters: dict[str, str],
    topic_name: str, tmp_path: Path
) -> None:
    venv, pins = venvs[end]
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
        done = subprocess.run([str(venv / "bin" / args[0]), *args[1:]], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600, check=False)
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
    from ferry.spark.jars import cache_dir

    jars = Path(os.environ.get("FERRY_CACHE_DIR") or cache_dir()) / "jars"
    assert jars.is_dir(), f"{jars}: the Delta jars are not fetched (scripts/setup.sh does)"
    return jars

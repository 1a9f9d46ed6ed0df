"""`docker compose config` accepts docker-compose.yaml and rejects broken copies of it: the
compose plugin where it is installed, else tools/composecheck (the same compose-go loading,
built with Go and cached). Both start a program, so these checks are here rather than in
tests/unit/test_compose.py, which reads the same file as the deployment's specification.

No Docker engine is needed: only the compose file is loaded, and variables take their
defaults (the values `docker compose up` uses without a .env file)."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from ferry.jars import cache_dir

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"

# `docker compose config`: the compose plugin where it runs, else tools/composecheck, which
# loads the file with compose-go (the plugin's own loader) and the options `config` uses.

CHECKER = ROOT / "tools" / "composecheck"


def _compose_plugin_runs() -> bool:
    """Whether `docker compose` works here (the docker client may lack the plugin)."""
    docker = shutil.which("docker")
    return docker is not None and subprocess.run(
        [docker, "compose", "version"], capture_output=True, check=False, timeout=60,
    ).returncode == 0


def _checker_binary() -> Path:
    """tools/composecheck, built once per version of its sources: the binary is cached in
    Ferry's cache dir under the hash of go.mod, go.sum, the Go files and the platform, so
    later runs (and other checkouts at the same version) skip `go build`."""
    digest = hashlib.sha256(f"{sys.platform}-{platform.machine()}".encode())
    for source in sorted(CHECKER.iterdir()):
        if source.name in ("go.mod", "go.sum") or source.suffix == ".go":
            digest.update(f"\0{source.name}\0".encode() + source.read_bytes())
    binary = cache_dir() / "composecheck" / f"composecheck-{digest.hexdigest()[:20]}"
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        pytest.fail("checking docker-compose.yaml needs the docker compose plugin or Go "
                    "(>= 1.24, to build tools/composecheck), and neither is installed here: "
                    "install one (https://go.dev/dl/) and rerun", pytrace=False)
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=binary.parent) as scratch:
        built = Path(scratch) / "composecheck"
        # -mod=readonly: build exactly the committed go.mod/go.sum, never rewrite them.
        result = subprocess.run(
            [go, "build", "-trimpath", "-o", str(built), "."], cwd=CHECKER,
            env={**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"},
            capture_output=True, text=True, check=False, timeout=540)
        if result.returncode != 0:
            pytest.fail(f"go build of tools/composecheck failed (if go.mod/go.sum are stale, "
                        f"run `go mod tidy` there and commit them):\n{result.stderr}",
                        pytrace=False)
        os.replace(built, binary)  # atomic: a concurrent run sees no half-written binary
    return binary


@cache
def _config_command() -> Callable[[Path], list[str]]:
    """The command line that checks a compose file as `docker compose config -q` does."""
    if _compose_plugin_runs():
        return lambda file: ["docker", "compose", "-f", str(file), "config", "-q"]
    checker = str(_checker_binary())
    return lambda file: [checker, str(file)]


def compose_config(file: Path) -> subprocess.CompletedProcess[str]:
    """`docker compose -f FILE config -q` (or its stand-in), the project dir being FILE's,
    with no FERRY_* or COMPOSE_* variable set: what `docker compose up` sees without a
    .env file (as in the tests above)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "COMPOSE_"))}
    return subprocess.run(_config_command()(file), cwd=file.parent, env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def test_docker_compose_config_accepts_the_file() -> None:
    result = compose_config(COMPOSE)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("old", "new", "named"), [
    pytest.param("name: ferry\n", "name: ferry\nmirrors: 2\n", "mirrors",
                 id="an unknown top-level key (schema validation)"),
    pytest.param('"19092:19092"', '"19092:kafka"', "kafka",
                 id="a port that is not a number"),
    pytest.param("- ferry-state:/opt/ferry/state", "- ferry-stat:/opt/ferry/state",
                 "ferry-stat", id="a named volume that is not declared (consistency)"),
    pytest.param("${FERRY_SPARK_WORKER_CORES:-2}", "${FERRY_SPARK_WORKER_CORES:?set it}",
                 "FERRY_SPARK_WORKER_CORES", id="a required variable unset (interpolation)"),
])
def test_docker_compose_config_rejects_a_broken_copy_of_the_file(
        tmp_path: Path, old: str, new: str, named: str) -> None:
    copy = tmp_path / COMPOSE.name
    text = COMPOSE.read_text()
    assert old in text, f"the file no longer has {old!r}: update this case"
    copy.write_text(text)
    accepted = compose_config(copy)
    assert accepted.returncode == 0, accepted.stderr  # a copy elsewhere is as valid
    copy.write_text(text.replace(old, new))
    rejected = compose_config(copy)
    assert rejected.returncode != 0 and named in rejected.stderr, rejected.stderr

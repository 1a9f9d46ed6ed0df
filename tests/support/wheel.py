"""Ferry's wheel, built from this checkout, and clean virtualenvs to install it into: what
a user's `pip install ferry-mirror[...]` gets, with nothing of the checkout on the path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def build_wheel(root: Path) -> Path:
    """The package's wheel, built into `root/dist` from a copy of the sources: setuptools
    leaves ferry.egg-info beside the sources, which in the checkout would sit on the dev
    install's path as a second copy of Ferry's metadata."""
    source = root / "source"
    shutil.copytree(REPO / "include", source / "include",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):  # the metadata's sources
        shutil.copy(REPO / name, source)
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "-q",
                    "--no-deps", "-w", str(root / "dist"), str(source)],
                   check=True, cwd=root, timeout=600)
    (wheel,) = (root / "dist").glob("ferry_mirror-*.whl")
    return wheel


def install(venv: Path, requirement: str, *pip_args: str) -> None:
    """A fresh virtualenv at `venv` with `requirement` installed (`pip_args` before it,
    e.g. `-c constraints.txt`)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", *pip_args, requirement], check=True,
                   cwd=venv.parent, timeout=1500)


def install_fast(venv: Path, requirement: str, *uv_args: str) -> None:
    """As `install`, through uv (the venv's, from the lock) in half pip's time, for tests
    whose subject is what gets installed rather than pip itself: uv also takes the newest
    versions the ranges admit, and constraints pin the rest either way. The venv has no pip
    of its own."""
    uv = str(Path(sys.executable).parent / "uv")
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
                   check=True, timeout=300)
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                    *uv_args, requirement], check=True, cwd=venv.parent, timeout=1500)


def clean_env(venv: Path, **extra: str) -> dict[str, str]:
    """This process's environment without Airflow's, Ferry's, Python's or Spark's settings,
    the venv's bin alone before the system's on PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "FERRY_", "PYTHON", "SPARK_", "VIRTUAL_ENV"))}
    return env | {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin"} | extra


def last_json(text: str) -> Any:
    """The JSON document at the end of a command's output (airflow's warnings may come
    before it)."""
    return json.loads(next(line for line in reversed(text.splitlines())
                           if line.startswith(("[", "{"))))

"""Installs the suite's tests need, made before the suite: they are installs, not tests,
so the test command makes them first (`python -m tests.support.installs`, timed apart) into
`.cache/`, and keeps them while what they were made from stays the same. The tests then only
put the checkout's wheel into them; a test run alone makes them itself.

- The package at both ends of its declared dependency ranges, each end a clean virtualenv:
  `ferry-mirror[spark,airflow]` at the lowest version each direct requirement admits, and
  at the newest the index has (about 1.3 GB each; tests/integration/test_dependency_ranges.py).
- The package as a provider in a clean Airflow: `ferry-mirror[airflow]` installed with pip,
  the repo's lock as constraints (tests/integration/test_wheel_install.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from tests.support.wheel import REPO, build_wheel, install, install_fast

EXTRAS = ("spark", "airflow")
ENDS = ("lowest", "newest")
PREPARED = REPO / ".cache" / "dependency-ranges"
"""Where the test command leaves both ends for the suite (ignored by git)."""
PROVIDER = REPO / ".cache" / "airflow-provider"
"""Where it leaves the provider's virtualenv (`venv/` inside)."""


@dataclass(frozen=True)
class Ends:
    """Both ends installed under `root`: `root/<end>` a virtualenv each, and the lowest
    version of each direct requirement (`pins`, what the lowest end must hold)."""

    root: Path
    pins: dict[str, str]

    def venv(self, end: str) -> Path:
        return self.root / end


def direct(requires: list[str], extras: tuple[str, ...]) -> list[Requirement]:
    """The package's direct requirements and those of `extras`; one without a lower bound
    fails, as a range whose low end cannot be tested."""
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


def metadata_requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]


def _key(requires: list[str]) -> str:
    """What the ends depend on: the package's requirements, this Python, and the day (the
    newest end follows the index, so a day-old one is installed again)."""
    text = json.dumps([sorted(requires), sys.version, time.strftime("%Y-%m-%d")])
    return hashlib.sha256(text.encode()).hexdigest()


def _requirement(wheel: Path) -> str:
    return f"ferry-mirror[{','.join(EXTRAS)}] @ {wheel.as_uri()}"


def install_ends(root: Path, wheel: Path) -> Ends:
    """Both ends under `root`, with `wheel` installed into each, installed at once (mostly
    downloads and unpacking)."""
    constraints, pins = lowest(direct(metadata_requires(wheel), EXTRAS), root)
    with ThreadPoolExecutor(len(ENDS)) as pool:
        # compiled as pip compiles what it installs: each of the test's commands would
        # otherwise compile Airflow's and Spark's modules again
        done = [pool.submit(install_fast, root / end, _requirement(wheel), "--compile-bytecode",
                            *(["-c", str(constraints)] if end == "lowest" else []))
                for end in ENDS]
    for future in done:
        future.result()
    (root / "pins.json").write_text(json.dumps(pins))
    return Ends(root, pins)


def _fresh(into: Path, key: str) -> bool:
    """Whether `into` holds an install made for `key`."""
    stamp = into / "key"
    return stamp.is_file() and stamp.read_text() == key


def _make(into: Path, key: Callable[[Path], str], make: Callable[[Path], object]) -> None:
    """`make(wheel)` into `into` afresh, unless `into` already holds one for the checkout's
    wheel's `key`; stamped once whole."""
    with tempfile.TemporaryDirectory() as scratch:
        wheel = build_wheel(Path(scratch))
        wanted = key(wheel)
        if _fresh(into, wanted):
            return
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True)
        make(wheel)
        (into / "key").write_text(wanted)


def prepare(into: Path = PREPARED) -> None:
    """Both ends installed at `into`, unless they already are for the package's current
    requirements (and today's index)."""
    _make(into, lambda wheel: _key(metadata_requires(wheel)),
          lambda wheel: install_ends(into, wheel))


def reinstall(ends: Ends, wheel: Path) -> None:
    """Put `wheel` into both ends in place of the Ferry they hold, with its own
    requirements checked against what each end has (nothing else changes: the lowest end
    keeps its lowest versions)."""
    for end in ENDS:
        python = str(ends.venv(end) / "bin" / "python")
        subprocess.run([str(Path(sys.executable).parent / "uv"), "pip", "install", "--quiet",
                        "--python", python, "--reinstall-package", "ferry-mirror",
                        _requirement(wheel)], check=True, timeout=600)
        checked = subprocess.run([str(Path(sys.executable).parent / "uv"), "pip", "check",
                                  "--python", python], capture_output=True, text=True,
                                 check=False, timeout=300)
        assert checked.returncode == 0, f"{end}: {checked.stdout}{checked.stderr}"


def prepared(scratch: Path) -> Ends:
    """Both ends holding the checkout's wheel: the test command's (`PREPARED`), or when it
    did not prepare them for these requirements, installed now under `scratch`."""
    wheel = build_wheel(scratch)
    if _fresh(PREPARED, _key(metadata_requires(wheel))):
        ends = Ends(PREPARED, json.loads((PREPARED / "pins.json").read_text()))
        reinstall(ends, wheel)
        return ends
    return install_ends(scratch, wheel)


def _provider_key(wheel: Path) -> str:
    """What the provider's install depends on: the package's requirements, the lock, this
    Python."""
    text = json.dumps([sorted(metadata_requires(wheel)),
                       (REPO / "requirements.txt").read_text(), sys.version])
    return hashlib.sha256(text.encode()).hexdigest()


def _install_provider(venv: Path, wheel: Path) -> None:
    install(venv, f"ferry-mirror[airflow] @ {wheel.as_uri()}", "-c",
            str(REPO / "requirements.txt"))


def prepare_provider(into: Path = PROVIDER) -> None:
    """The provider's virtualenv at `into/venv`, unless it is there for the package's
    current requirements and lock."""
    _make(into, _provider_key, lambda wheel: _install_provider(into / "venv", wheel))


def prepared_provider(scratch: Path) -> Path:
    """A virtualenv of the provider holding the checkout's wheel: the test command's, or
    when it did not make one for these requirements, installed now under `scratch`."""
    wheel = build_wheel(scratch)
    if not _fresh(PROVIDER, _provider_key(wheel)):
        _install_provider(scratch / "venv", wheel)
        return scratch / "venv"
    venv = PROVIDER / "venv"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, timeout=600)
    checked = subprocess.run([*pip, "check"], capture_output=True, text=True, check=False,
                             timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return venv


if __name__ == "__main__":
    for what, make in (("dependency ranges: both ends", prepare),
                       ("the provider in a clean Airflow", prepare_provider)):
        started = time.monotonic()
        make()
        print(f"{what}: installed ({time.monotonic() - started:.0f} s)", flush=True)
    # uv builds pyspark's sdist again for each of these installs and keeps every build
    # (0.5-1.4 GB each) beside the old ones: 30 GB in a day of test runs here, once a full
    # disk. Drop the builds and downloads no current cache entry refers to.
    subprocess.run([str(Path(sys.executable).parent / "uv"), "cache", "prune", "--quiet"],
                   check=True, timeout=600)

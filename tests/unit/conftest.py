"""Unit tests start no process: every one runs under an audit hook that fails it at the
first process it would start (those tests belong in tests/integration)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ferry.config import Config, load_config

BASE = """
clusters = A, B
A.bootstrap.servers = a1:9092,a2:9092
B.bootstrap.servers = b1:9092
A->B.enabled = true
"""

Loader = Callable[..., Config]

SPAWNS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
          "os.forkpty", "pty.spawn")
forbidden: dict[str, str] = {}
"""Audit event -> why it fails the running unit test (a conftest below may add to it)."""


def _audit(event: str, _args: tuple[Any, ...]) -> None:
    if event in forbidden:
        raise AssertionError(f"a unit test did {event}: {forbidden[event]}")


sys.addaudithook(_audit)  # inert outside unit tests (audit hooks cannot be removed)


@pytest.fixture(autouse=True)
def no_process() -> Iterator[None]:
    forbidden.update(dict.fromkeys(SPAWNS, "a process belongs in tests/integration"))
    try:
        yield
    finally:
        forbidden.clear()


@pytest.fixture
def load(tmp_path: Path) -> Loader:
    """Write `text` to mm2.properties (plus `files`) in a temp dir and load it."""

    def _load(text: str, files: Mapping[str, str] | None = None,
              env: Mapping[str, str] | None = None, name: str = "mm2.properties") -> Config:
        for rel, content in (files or {}).items():
            path = tmp_path / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        config = tmp_path / name
        config.write_text(text)
        return load_config(config, env=env or {})

    return _load

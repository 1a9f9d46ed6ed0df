"""The steps' unit tests run against in-memory clusters (`fakes.py`): none of them may
start a process, open a network connection or build a Kafka client."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ferry.kafka.admin
import ferry.kafka.mm2topics
import ferry.kafka.records
from ferry.config import MirrorConfig
from tests.unit.conftest import Loader

FORBIDDEN = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
             "os.fork", "os.forkpty", "pty.spawn", "socket.connect")
_guard = {"on": False}


def _audit(event: str, _args: tuple[Any, ...]) -> None:
    if _guard["on"] and event in FORBIDDEN:
        raise AssertionError(f"a unit test of the steps did {event}: use the fakes")


sys.addaudithook(_audit)  # inert outside these tests (audit hooks cannot be removed)


def _no_client(*_args: Any, **_kwargs: Any) -> None:
    raise AssertionError("a unit test of the steps built a Kafka client: pass it a fake")


@pytest.fixture(autouse=True)
def no_process_no_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for module, name in ((ferry.kafka.admin, "AdminClient"), (ferry.kafka.admin, "Consumer"),
                         (ferry.kafka.records, "Consumer"), (ferry.kafka.mm2topics, "Producer")):
        monkeypatch.setattr(module, name, _no_client)
    _guard["on"] = True
    try:
        yield
    finally:
        _guard["on"] = False


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def config(load: Loader, state_dir: Path) -> MirrorConfig:
    """A->B mirroring every topic, its state (Delta) in a temp dir."""
    return load(f"""
clusters = A, B
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
A->B.enabled = true
ferry.state.dir = {state_dir}
""")

"""The steps' unit tests run against in-memory clusters (`fakes.py`): none of them may
start a process, open a network connection or build a Kafka client."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ferry.kafka.admin
import ferry.kafka.mm2topics
import ferry.kafka.records
from ferry.config import Config
from tests.unit.conftest import Loader, forbidden


def _no_client(*_args: Any, **_kwargs: Any) -> None:
    raise AssertionError("a unit test of the steps built a Kafka client: pass it a fake")


@pytest.fixture(autouse=True)
def no_network_no_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside the unit tier's no-process rule: no connection, no Kafka client."""
    for module, name in ((ferry.kafka.admin, "AdminClient"), (ferry.kafka.admin, "Consumer"),
                         (ferry.kafka.records, "Consumer"), (ferry.kafka.mm2topics, "Producer")):
        monkeypatch.setattr(module, name, _no_client)
    forbidden["socket.connect"] = "the steps' unit tests use the fakes"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


ConfigWith = Callable[[str], Config]


@pytest.fixture
def config_with(load: Loader, state_dir: Path) -> ConfigWith:
    """A->B mirroring every topic, its state (Delta) in a temp dir, plus the lines given."""
    def make(extra: str = "") -> Config:
        return load(f"""
clusters = A, B
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
A->B.enabled = true
ferry.state.dir = {state_dir}
""" + extra)

    return make


@pytest.fixture
def config(config_with: ConfigWith) -> Config:
    """A->B mirroring every topic, its state (Delta) in a temp dir."""
    return config_with()

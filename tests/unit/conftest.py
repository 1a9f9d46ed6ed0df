from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from ferry.config import MirrorConfig, load_config

BASE = """
clusters = A, B
A.bootstrap.servers = a1:9092,a2:9092
B.bootstrap.servers = b1:9092
A->B.enabled = true
"""

Loader = Callable[..., MirrorConfig]


@pytest.fixture
def load(tmp_path: Path) -> Loader:
    """Write `text` to mm2.properties (plus `files`) in a temp dir and load it."""

    def _load(text: str, files: Mapping[str, str] | None = None,
              env: Mapping[str, str] | None = None, name: str = "mm2.properties") -> MirrorConfig:
        for rel, content in (files or {}).items():
            path = tmp_path / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        config = tmp_path / name
        config.write_text(text)
        return load_config(config, env=env or {})

    return _load

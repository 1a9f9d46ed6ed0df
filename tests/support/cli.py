"""Ferry's command line run as a user runs it: the venv's ferry script in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def ferry(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`ferry ARGS`, with FERRY_HOME set to `home` when given."""
    binary = Path(sys.executable).parent / "ferry"
    env = {**os.environ, **({"FERRY_HOME": str(home)} if home else {})}
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=600,
                          check=False, env=env)

"""The installed `ferry` console script: a bad config is one line on stderr and exit 2,
never a traceback (the same path in-process is tested in tests/unit/cli/test_cli_validate.py;
this one starts the program)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("clusters = A\nA.bootstrap.servers = x\n")
    ferry = Path(sys.executable).parent / "ferry"
    result = subprocess.run([str(ferry), "validate", str(bad)], capture_output=True, text=True,
                            env={**os.environ}, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "A.bootstrap.servers = 'x': 'x' is not host:port" in result.stderr

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


def test_output_into_a_pipe_closed_early_ends_quietly_with_141(tmp_path: Path) -> None:
    # given a reader that has gone before the output comes (`true` reads nothing and exits
    # at once; ferry takes far longer to start), as `| head -1` is gone after one line
    config = Path(__file__).resolve().parents[2] / "examples" / "multi-flow.properties"
    ferry = Path(sys.executable).parent / "ferry"

    # when
    result = subprocess.run(f"'{ferry}' validate '{config}' | true; echo ${{PIPESTATUS[0]}}",
                            shell=True, capture_output=True, text=True, env={**os.environ},
                            check=False, executable="/bin/bash")

    # then: its write met the closed pipe, and it ended as a shell tool does: 128 + SIGPIPE,
    # no traceback (BrokenPipeError) on stderr
    assert result.stdout.strip() == "141", result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr

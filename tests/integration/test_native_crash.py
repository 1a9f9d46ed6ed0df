"""A native crash in any Ferry process prints the Python stack of the call that crashed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ferry.spark.submit import job_path

pytestmark = pytest.mark.integration

ENTRY_POINTS = {
    "cli": "from ferry.cli.main import main\nmain(['validate', '/nonexistent.properties'])",
    "copy job": "import runpy, sys\nsys.argv = ['ferry_copy.py', '--config', '/nonexistent',"
                " '--flow', 'a->b', '--plan', 'p.json']\n"
                f"runpy.run_path({job_path()!r}, run_name='x')"
                "['main'](sys.argv[1:])",
    "airflow task": "from ferry.airflow.tasks import task_config\n"
                    "try:\n    task_config('/nonexistent')\nexcept Exception:\n    pass",
    "spark lane task": "from ferry import logs\nlogs.setup()",
}


def _crash_after(setup: str) -> subprocess.CompletedProcess[str]:
    script = setup + "\n" + textwrap.dedent("""
        import ctypes
        def the_crashing_call():
            ctypes.string_at(0)  # a read of address 0: SIGSEGV in native code
        the_crashing_call()
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS), ids=list(ENTRY_POINTS))
def test_a_segfault_after_an_entry_point_started_prints_the_crashing_python_call(
        entry: str) -> None:
    done = _crash_after(ENTRY_POINTS[entry])

    assert done.returncode == -11, done.stderr[-2000:]
    assert "Fatal Python error: Segmentation fault" in done.stderr
    assert "the_crashing_call" in done.stderr  # the Python frame that made the native call


def test_without_an_entry_point_a_segfault_says_nothing() -> None:
    """The control: the stack above comes from Ferry's set-up, not from Python's defaults."""
    done = _crash_after("pass")

    assert done.returncode == -11
    assert "the_crashing_call" not in done.stderr

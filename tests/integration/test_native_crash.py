"""A native crash in any Ferry process prints the Python stack of the call that crashed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ferry.core.tables import RUNS_DDL
from ferry.spark.submit import job_path
from ferry.state.writer import append

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


READ_STATE_AND_EXIT = """
import sys
from ferry.state import digest, reader
path, flow = sys.argv[1:3]
assert digest.copied_totals(path, flow) is not None
assert reader.recorded_run_ids(path, flow, {"r1"}) == {"r1"}
print(len(reader.rows(path, flow)))  # the last read just before the interpreter ends
"""


def test_a_process_that_read_the_state_ends_normally_without_a_native_abort(
        tmp_path: Path) -> None:
    # given: a state table, and processes that read it and then let the interpreter finish
    # as a script does (no os._exit). Were Arrow's reading threads to call back into Python
    # (delta-rs's filesystem is a Python one), one that did so as the interpreter finalizes
    # is ended inside C++ frames: "terminate called without an active exception", SIGABRT
    # after the work was done. That ended about half of such processes here, so ten in a
    # row leave no room for luck.
    from tests.unit.state.test_state_reader import runs_row

    path = str(tmp_path / "runs")
    append(path, RUNS_DDL, [runs_row("A->B", f"r{i}") for i in range(3)])
    append(path, RUNS_DDL, [runs_row("A->B", "r3")])

    # when
    ends = [subprocess.run([sys.executable, "-X", "faulthandler", "-c", READ_STATE_AND_EXIT,
                            path, "A->B"], capture_output=True, text=True, timeout=120)
            for _ in range(10)]

    # then: every one read and exited 0
    assert [(e.returncode, e.stdout.strip()) for e in ends] == [(0, "4")] * 10, (
        [e.stderr[-600:] for e in ends if e.returncode])

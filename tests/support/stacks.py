"""The Python stacks of live processes, for a test that finds something hung: what each
thread of the process waits on, read from outside with py-spy (no cooperation from the
process, so a thread stuck in native code shows too)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import psutil


def spark_python_workers() -> list[int]:
    """Pids of the Python processes Spark runs lanes in (pyspark's daemon and the workers it
    forks), on every local Spark of this machine."""
    pids = set[int]()
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "pyspark" in cmdline and ("daemon" in cmdline or "worker" in cmdline):
            pids.add(process.pid)
            try:
                pids.update(child.pid for child in process.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
    return sorted(pids)


def dump(pids: list[int]) -> str:
    """Every thread's Python stack of each of `pids` (`py-spy dump`), one block per process;
    a process that is gone or cannot be read says so in its block."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    blocks = []
    for pid in pids:
        try:
            out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                                 text=True, timeout=30, check=False)
            text = out.stdout or out.stderr
        except (OSError, subprocess.TimeoutExpired) as exc:
            text = f"py-spy failed: {exc}"
        blocks.append(f"=== pid {pid}\n{text.strip()}")
    return "\n".join(blocks)

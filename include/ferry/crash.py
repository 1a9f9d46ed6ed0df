"""Native crashes print a Python stack (every Ferry entry point calls `enable`).

librdkafka, Arrow, delta-rs and the JVM bridge run native code in Ferry's processes; a
crash there kills the process with a signal and no message. `faulthandler` writes the
Python stack of every thread to the process's real stderr (file descriptor 2, which
Airflow's task supervisor and spark-submit capture) before the process dies, so the call
that crashed is named in the task log or the terminal.
"""

from __future__ import annotations

import faulthandler
import sys


def enable() -> None:
    """Turn on `faulthandler` for every thread (idempotent). Writes to the original stderr
    even where a runner replaced `sys.stderr` with an object that has no file descriptor."""
    if faulthandler.is_enabled():
        return
    stream = sys.__stderr__
    try:
        if stream is None:
            raise ValueError("no stderr")
        stream.fileno()
        faulthandler.enable(file=stream, all_threads=True)
    except (AttributeError, OSError, ValueError):
        faulthandler.enable(file=2, all_threads=True)

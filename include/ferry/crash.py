"""Native crashes print a Python stack (every Ferry entry point calls `enable`), and a
process whose work is done ends without finalizing native libraries (`exit_now`).

librdkafka, Arrow, delta-rs and the JVM bridge run native code in Ferry's processes; a
crash there kills the process with a signal and no message. `faulthandler` writes the
Python stack of every thread to the process's real stderr (file descriptor 2, which
Airflow's task supervisor and spark-submit capture) before the process dies, so the call
that crashed is named in the task log or the terminal.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
from typing import NoReturn


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


def exit_now(code: int) -> NoReturn:
    """End the process with `code` once its logs and output are flushed, without the
    interpreter's finalization. Native libraries' threads (librdkafka, Arrow) can abort an
    interpreter that finalizes after the work is done and printed ("terminate called
    without an active exception", exit code -6, seen on an idle `ferry mirror` and after
    Delta reads); nothing is left to clean up by then. Airflow's task processes end the
    same way (its supervisor's child calls `os._exit`)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)

"""Polling instead of sleeping: wait until a condition holds, within a bound."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60,
               every: float = 0.1) -> None:
    """Poll `condition` every `every` seconds until it holds; fail naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(every)

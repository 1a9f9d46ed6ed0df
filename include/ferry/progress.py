"""Progress of long work: records done/total, rate and ETA, logged at most every few
seconds with the flow (and lane) as context."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


def describe(done: int, total: int, seconds: float) -> str:
    rate = done / seconds if seconds > 0 else 0.0
    percent = 100.0 * done / total if total else 100.0
    if rate > 0 and total > done:
        eta = f"ETA {(total - done) / rate:.0f}s"
    else:
        eta = "ETA -" if total > done else "done"
    return f"{done:,}/{total:,} records ({percent:.0f}%), {rate:,.0f} records/s, {eta}"


class Progress:
    """Call with (done, total); logs when `every` seconds have passed or work is done."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[logging.Logger],
                 what: str, every: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.what, self.every, self.clock = log, what, every, clock
        self.started = clock()
        self.last = self.started

    def __call__(self, done: int, total: int) -> None:
        """`done == 0` (re)starts the clock: the rate covers the copying, not set-up."""
        now = self.clock()
        if done == 0:
            self.started = self.last = now
            return
        if now - self.last >= self.every or done >= total:
            self.last = now
            self.log.info("%s: %s", self.what, describe(done, total, now - self.started))

"""Give the heap's free memory back to the operating system, in a long-lived process.

glibc's malloc keeps what a process frees for its next allocations, and returns to the
system only free memory at the top of the main heap. A continuous loop at ten thousand
partitions builds and drops structures of every partition each cycle (ends, positions,
Delta batches) in several threads, each with heaps of its own: its resident memory
climbed by a fifth over a hundred cycles and more over three hundred, of which a single
`malloc_trim` gave back about a hundred MiB, while the memory malloc had handed out stayed
level (about 200 MiB from the first cycles on). So the loop trims between cycles, at most
every few seconds (`Trimming`): a trim takes about a millisecond, or tens of milliseconds
when it returns hundreds of MiB. It also keeps fewer heaps (`limit_arenas`).

Elsewhere (musl, macOS) there is no `malloc_trim`, and trimming does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_INTERVAL_S = 5.0
"""How often a loop trims at most. Every 30 s let a loop's resident memory swing by a
fifth with what the cycles between trims freed; every 5 s keeps it within a few per cent."""


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim` among the symbols the process has loaded (no library search:
    that would start `ldconfig`), or None."""
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim  # type: ignore[no-any-return]


_TRIM = _malloc_trim()

M_ARENA_MAX = -8
"""mallopt's parameter for the most heaps ("arenas") malloc keeps (glibc's malloc.h)."""

LOOP_ARENAS = 2
"""The heaps a continuous loop's process keeps. By default glibc gives threads up to eight
heaps per core, and a loop runs dozens of threads (librdkafka's, the lanes', the
recorder's): each heap keeps its own free memory and fragments on its own. With two,
its resident memory at 10,000 partitions stayed within 5 % over a hundred cycles, where
with the default it rose by 7–14 % (both trimming every 5 s)."""


def limit_arenas(arenas: int = LOOP_ARENAS) -> bool:
    """Have malloc keep at most `arenas` heaps from now on (heaps made already stay);
    whether it took. Call it before a long-lived process starts its threads."""
    try:
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    except OSError:
        return False
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))


def trim() -> bool:
    """Return the free memory of every heap of the process to the system (glibc); whether
    anything was returned. False, and nothing done, where malloc has no trim."""
    return bool(_TRIM(0)) if _TRIM is not None else False


class Trimming:
    """Trims at most once every `interval_s` seconds: call `after_cycle` between cycles."""

    def __init__(self, interval_s: float = TRIM_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic,
                 release: Callable[[], bool] = trim) -> None:
        self.interval_s, self._clock, self._release = interval_s, clock, release
        self._last: float | None = None
        self.trims = 0

    def after_cycle(self) -> None:
        """Trim when the last trim is `interval_s` old (or there was none)."""
        now = self._clock()
        if self._last is not None and now - self._last < self.interval_s:
            return
        self._last = now
        started = time.monotonic()
        released = self._release()
        self.trims += 1
        log.debug("heap trimmed in %.3fs (%s)", time.monotonic() - started,
                  "memory returned" if released else "nothing to return")

"""Calls made at the same moment from several threads, for races forced in tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def at_once(call: Callable[[], T], callers: int = 2, timeout: float = 60
            ) -> tuple[list[T], list[BaseException]]:
    """`call()` from `callers` threads started together: what they returned, and what they
    raised (each thread joined within `timeout`)."""
    got: list[T] = []
    failed: list[BaseException] = []

    def one() -> None:
        try:
            got.append(call())
        except BaseException as exc:  # handed to the test
            failed.append(exc)

    threads = [threading.Thread(target=one) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return got, failed

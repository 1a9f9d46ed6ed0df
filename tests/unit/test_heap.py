"""A long-lived loop gives the heap's free memory back to the system between cycles, at
most every so often: the pacing as a table, and glibc's trim on this process's own heap."""

from __future__ import annotations

import pytest

from ferry.heap import Trimming, limit_arenas, trim


@pytest.mark.parametrize(
    ("cycles_at", "trimmed_at"),
    [
        ([0.0], [0.0]),
        ([0.0, 1.0, 29.9], [0.0]),
        ([0.0, 10.0, 30.0, 45.0, 61.0], [0.0, 30.0, 61.0]),
        ([5.0, 500.0], [5.0, 500.0]),
    ],
    ids=["the-first-cycle", "cycles-within-the-interval", "one-per-interval", "far-apart"],
)
def test_a_loop_trims_after_its_first_cycle_then_at_most_once_an_interval(
    cycles_at: list[float], trimmed_at: list[float]
) -> None:
    now = [0.0]
    trims: list[float] = []

    def release() -> bool:
        trims.append(now[0])
        return True

    trimming = Trimming(30.0, clock=lambda: now[0], release=release)
    for at in cycles_at:
        now[0] = at
        trimming.after_cycle()

    assert trims == trimmed_at
    assert trimming.trims == len(trimmed_at)


def _resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_a_trim_returns_the_free_memory_between_live_blocks_to_the_system() -> None:
    # given: 200 MiB in 4 KiB blocks (malloc's, not Python's small-object arenas), all but
    # one in 64 freed: free memory between live blocks, which malloc keeps
    blocks = [bytearray(4096) for _ in range(51_200)]
    kept = blocks[::64]
    del blocks
    before = _resident()

    # when
    returned = trim()

    # then: most of it went back to the system
    assert returned is True
    assert before - _resident() > 100 * 2**20
    assert len(kept) == 800


def test_malloc_takes_a_limit_on_its_heaps() -> None:
    # glibc's mallopt answers 1 when it took the setting, 0 when it refused it
    assert limit_arenas() is True

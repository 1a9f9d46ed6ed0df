"""Calls librdkafka may never return from, bounded (adapter).

`send_offsets_to_transaction` ignores its timeout while it waits for the group coordinator
(librdkafka issues 5456 and 5511, open in the bundled 2.16): after a clean restart of the
node that was the positions group's coordinator, a producer that cached it as coordinator
waits for that broker object, which librdkafka retired when the node left the cluster's
metadata, and nothing wakes the call again — it was seen still blocked minutes after every
node was back (a rolling restart under a continuous run). Another call on the same
producer does not wake it; a new producer of the same transactional id does not have the
stale entry, and its `init_transactions` fences the stuck one and aborts its transaction.

So the lane makes that call through `bounded`: in a helper thread, waited for at most a
bound. A call that has not returned by then raises `ProducerStuck`, and the lane replaces
the producer and copies the batch again from the committed positions (`kafka/lane.py`).
The stuck call's thread is left behind (a daemon; nothing can interrupt it) and ends with
an error once librdkafka wakes it: its producer was fenced, so nothing it sends counts.

`within` is the one way Ferry makes a call it may have to give up on: a stuck producer's
call (`bounded`), and a continuous loop's cycle, abandoned as hung after
`ferry.cycle.timeout.seconds` (`ferry.steps.cycle`). Each thread given up on is counted,
with the clients it holds, while it lives (`LeftBehind`): a loop that runs for months ends
once more than `LEFT_BEHIND_MAX` are alive, so that its supervisor starts it afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Producer, TopicPartition

T = TypeVar("T")

SEND_OFFSETS_S = 10.0
"""What `send_offsets_to_transaction` is given as its own timeout; it is bounded at this
plus `GRACE_S`. A healthy call takes milliseconds; a coordinator that moved is found again
within seconds (the brokers fence a silent node and elect and load a new one), so a call
this slow is taken for stuck. The bound is how long the stuck call holds its partitions:
at 35 s it was most of Ferry's worst lag under rolling restarts (44 s where MirrorMaker 2
fell 8 s behind), and of its recovery from a black-holed target; giving up too early only
copies one batch again."""
GRACE_S = 2.0


LEFT_BEHIND_MAX = 8
"""How many threads given up on (`within`) a process may carry alive, each with the clients
it holds: an abandoned cycle (its lanes' producers and consumers) or a stuck producer call
(its producer). A few wake and end within minutes; more than this means they do not."""


class ProducerStuck(Exception):
    """A producer call did not return within its bound: the producer is to be replaced."""


class LeftBehind:
    """The threads of calls given up on (`within`) that are still alive, and the bound on
    them. Thread-safe."""

    def __init__(self, bound: int = LEFT_BEHIND_MAX) -> None:
        self.bound = bound
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def add(self, thread: threading.Thread) -> None:
        with self._lock:
            self.threads.append(thread)

    def alive(self) -> int:
        """How many are still alive (those that ended are forgotten)."""
        with self._lock:
            self.threads = [t for t in self.threads if t.is_alive()]
            return len(self.threads)

    def over(self) -> str | None:
        """One line naming the bound when more than `bound` are alive, else None."""
        alive = self.alive()
        if alive <= self.bound:
            return None
        names = sorted({t.name for t in self.threads})
        return (f"{alive} threads of abandoned cycles and stuck producer calls are still "
                f"alive in this process ({', '.join(names[:3])}"
                f"{', …' if len(names) > 3 else ''}), with the clients they hold: more than "
                f"its bound of {self.bound} (ferry.kafka.stuck.LEFT_BEHIND_MAX); the loop "
                "ends, for its supervisor to start it afresh")


def within(call: Callable[[], T], seconds: float, what: str,
           left: LeftBehind | None = None) -> tuple[bool, T | None]:
    """(True, `call()`'s result), made in a daemon thread named after `what` and waited for
    at most `seconds`; its exception is raised here. (False, None) when it has not returned
    by then: the thread is left to it, counted in `left` while it lives (None: a run that
    ends anyway, so counts nothing; a continuous loop counts them in its runtime's)."""
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name=f"ferry {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        if left is not None:
            left.add(thread)
        return False, None
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return True, value  # type: ignore[return-value]


def bounded(call: Callable[[], T], seconds: float, what: str,
            left: LeftBehind | None = None) -> T:
    """`call()`'s result or exception (`within`, its thread counted in `left` when it is
    left behind); `ProducerStuck` naming `what` when it has not returned within `seconds`."""
    done, value = within(call, seconds, what, left)
    if not done:
        raise ProducerStuck(f"{what} did not return within {seconds:.0f}s")
    return value  # type: ignore[return-value]


def send_offsets(producer: Producer, offsets: list[TopicPartition], metadata: Any,
                 what: str, left: LeftBehind | None = None) -> None:
    """`producer.send_offsets_to_transaction(offsets, metadata)`, bounded: its own timeout
    `SEND_OFFSETS_S`, waited for at most that plus `GRACE_S` (see `bounded`)."""
    bounded(lambda: producer.send_offsets_to_transaction(offsets, metadata, SEND_OFFSETS_S),
            SEND_OFFSETS_S + GRACE_S, what, left)

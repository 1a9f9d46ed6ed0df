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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Producer, TopicPartition

T = TypeVar("T")

SEND_OFFSETS_S = 30.0
"""What `send_offsets_to_transaction` is given as its own timeout; it is bounded at this
plus `GRACE_S`. A healthy call takes milliseconds; a coordinator that moved is found again
within seconds (the brokers elect and load it), so a call this slow is taken for stuck."""
GRACE_S = 5.0


class ProducerStuck(Exception):
    """A producer call did not return within its bound: the producer is to be replaced."""


def bounded(call: Callable[[], T], seconds: float, what: str) -> T:
    """`call()`'s result or exception, made in a helper thread and waited for at most
    `seconds`; `ProducerStuck` naming `what` when it has not returned by then."""
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
        raise ProducerStuck(f"{what} did not return within {seconds:.0f}s")
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def send_offsets(producer: Producer, offsets: list[TopicPartition], metadata: Any,
                 what: str) -> None:
    """`producer.send_offsets_to_transaction(offsets, metadata)`, bounded: its own timeout
    `SEND_OFFSETS_S`, waited for at most that plus `GRACE_S`."""
    bounded(lambda: producer.send_offsets_to_transaction(offsets, metadata, SEND_OFFSETS_S),
            SEND_OFFSETS_S + GRACE_S, what)

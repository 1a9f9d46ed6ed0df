"""A partition's watermarks as a consumer reads them, trusted only when they are offsets.

While a partition's leader moves, librdkafka can answer `get_watermark_offsets` without an
error and with -1001 (its invalid offset). Read as an end, that looks like an empty or a
recreated partition; read as a start, like a log start before offset 0. Such an answer is no
answer: `watermarks` raises `Again`, so the `retrying` loop around it asks once more, within
its budget, and names the partition if the budget runs out (as `KafkaAdmin`'s list_offsets
answers are checked).
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from ferry.errors import TransientError
from ferry.kafka.retry import Again


class NoOffsetAnswered(TransientError):
    """A watermark read answered an invalid offset (a leader moving)."""


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float
               ) -> tuple[int, int]:
    """(log start, end) of the partition; `Again` for an answer that is not an offset. Call
    it inside `ferry.kafka.retry.retrying`."""
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                               timeout=timeout)
    if low < 0 or high < 0:
        raise Again(NoOffsetAnswered(
            f"{topic}-{partition} answered no valid offset ({low}, {high}): its leader is "
            "moving"))
    return int(low), int(high)

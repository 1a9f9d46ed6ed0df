"""Partitions a client's metadata does not list yet (adapter).

librdkafka keeps each topic's partition count from its last metadata answer and asks again
only every `topic.metadata.refresh.interval.ms` (five minutes by default). Until then a
client that learnt a topic before it grew answers "Local: Unknown partition" for the new
partitions, at once and without asking a broker: `produce` raises, `get_watermark_offsets`
fails. Ferry meets that state in two places, neither an error of the flow:

- a continuous loop's kept clients (`ferry.kafka.kept`) learnt the remote topics in an
  earlier cycle, and the sync of this cycle grew them after the source grew;
- a new client asked a broker whose metadata had not caught up with a growth the
  controller had just made (seen at ten thousand partitions).

The partition is there (the sync grows the remote topic before the plan names its new
partitions), so this passes: asking for the topic's metadata again updates the client's
view. `learn_partition` asks until the partition is listed, within the retry budget
(`ferry.kafka.retry.seconds`); only then is the call's failure reported.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException

from ferry.kafka.retry import backoff

CALL_TIMEOUT_S = 10.0
"""The longest one metadata request may take."""


class Lister(Protocol):
    """A confluent-kafka client: Producer, Consumer and AdminClient all list topics."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...


def unknown_partition(exc: BaseException) -> bool:
    """Whether `exc` is librdkafka saying a partition is not in the client's metadata."""
    return isinstance(exc, KafkaException) and bool(exc.args) \
        and isinstance(exc.args[0], KafkaError) \
        and exc.args[0].code() == KafkaError._UNKNOWN_PARTITION


def lists(client: Lister, topic: str, partition: int, timeout: float = CALL_TIMEOUT_S
          ) -> bool:
    """Ask for `topic`'s metadata (which updates the client's own view of it): whether it
    lists `partition`. No answer is False."""
    try:
        found = client.list_topics(topic, timeout=timeout).topics.get(topic)
    except KafkaException:
        return False
    return found is not None and found.error is None and partition in found.partitions


def learn_partition(client: Lister, topic: str, partition: int, budget_s: float, *,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep,
                    jitter: Callable[[], float] = random.random) -> bool:
    """Ask for `topic`'s metadata until `client` lists `partition` (True), with the retry
    loop's backoff between requests, or until `budget_s` seconds have passed (False: a
    topic deleted and made again with fewer partitions, or a cluster that does not
    answer; the caller reports its own call's failure)."""
    deadline = clock() + budget_s
    attempt = 0
    while True:
        attempt += 1
        left = deadline - clock()
        if lists(client, topic, partition, max(0.1, min(CALL_TIMEOUT_S, left))):
            return True
        left = deadline - clock()
        if left <= 0:
            return False
        sleep(min(backoff(attempt, jitter()), left))

"""A partition a client's metadata does not list yet (a topic grown since the client learnt
it) is asked for until it is listed, within the retry budget; what counts as that state.
Pure: a client whose answers are scripted, a fake clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from ferry.kafka.metadata import learn_partition, unknown_partition

TOPIC = "source.orders"


def listing(partitions: int | None, error: int | None = None) -> Any:
    """The metadata of TOPIC with `partitions` (None: not listed at all)."""
    if partitions is None:
        return SimpleNamespace(topics={})
    topic = SimpleNamespace(partitions={p: object() for p in range(partitions)},
                            error=KafkaError(error) if error is not None else None)
    return SimpleNamespace(topics={TOPIC: topic})


@dataclass
class Scripted:
    """A client answering `list_topics` with `answers` in turn (an exception is raised),
    the last one for ever; the clock moves by `each` seconds per request."""

    answers: list[Any]
    each: float = 1.0
    now: float = 0.0
    asked: list[str | None] = field(default_factory=list)
    slept: list[float] = field(default_factory=list)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.asked.append(topic)
        self.now += self.each
        answer = self.answers[min(len(self.asked), len(self.answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


NO_ANSWER = KafkaException(KafkaError(KafkaError._TRANSPORT))


@pytest.mark.parametrize(
    ("answers", "partition", "budget", "learnt", "requests"),
    [
        ([listing(8)], 7, 30.0, True, 1),
        ([listing(4), listing(4), listing(8)], 7, 30.0, True, 3),
        ([NO_ANSWER, listing(8)], 5, 30.0, True, 2),
        ([listing(None), listing(8)], 5, 30.0, True, 2),
        ([listing(8, KafkaError.LEADER_NOT_AVAILABLE), listing(8)], 5, 30.0, True, 2),
        ([listing(4)], 7, 10.0, False, None),
        ([NO_ANSWER], 7, 10.0, False, None),
        ([listing(4)], 7, 0.0, False, 1),
    ],
    ids=["listed-at-first-ask", "listed-after-two-stale-answers", "after-no-answer",
         "after-a-listing-without-the-topic", "after-a-topic-error",
         "never-listed-within-the-budget", "never-answered-within-the-budget",
         "no-budget-asks-once"],
)
def test_a_partition_new_to_a_client_is_asked_for_until_listed_within_the_budget(
    answers: list[Any], partition: int, budget: float, learnt: bool, requests: int | None
) -> None:
    client = Scripted(answers)

    found = learn_partition(client, TOPIC, partition, budget, clock=client.clock,
                            sleep=client.sleep, jitter=lambda: 0.0)

    assert found is learnt
    assert set(client.asked) == {TOPIC}  # one topic's metadata, never the whole cluster's
    if requests is not None:
        assert len(client.asked) == requests
    # it stops once the budget is spent, overrunning it by at most one request's time
    assert client.now <= budget + client.each


def test_the_backoff_between_requests_grows() -> None:
    client = Scripted([listing(4)], each=0.0)

    learn_partition(client, TOPIC, 7, 10.0, clock=client.clock, sleep=client.sleep,
                    jitter=lambda: 0.0)

    assert client.slept[:4] == [0.1, 0.2, 0.4, 0.8]
    assert sum(client.slept) == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION)), True),
        (KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)), False),
        (KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC)), False),
        (KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)), False),
        (KafkaException("no error object"), False),
        (ValueError("not Kafka's"), False),
    ],
    ids=["unknown-partition", "unknown-topic-or-partition-from-a-broker",
         "unknown-topic", "a-refusal", "an-exception-without-an-error", "another-exception"],
)
def test_only_librdkafkas_unknown_partition_is_a_partition_new_to_the_client(
    failure: BaseException, expected: bool
) -> None:
    assert unknown_partition(failure) is expected

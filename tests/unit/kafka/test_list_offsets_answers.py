"""An end or start offset is trusted only when it is a real offset. While a partition's
leader moves, librdkafka's ListOffsets may answer a partition with no error and offset
-1001 (its "invalid offset"); read as the source's end, that looked like a recreated topic
and stopped a continuous run during a rolling restart. Pure: the admin's client is a stand-in
answering with real futures, no broker."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from ferry.config.clients import ClientConfig
from ferry.core.planner import TopicPartition as TP
from ferry.errors import TransientError
from ferry.kafka.admin import Admin
from ferry.kafka.limits import PER_CALL


class Answers:
    """A ListOffsets that answers each call with the next of `offsets` for every partition."""

    def __init__(self, *offsets: int) -> None:
        self.offsets, self.calls, self.refreshed = list(offsets), 0, 0

    def list_offsets(self, request: dict[TopicPartition, Any], **_: Any
                     ) -> dict[TopicPartition, Future[Any]]:
        offset = self.offsets[min(self.calls, len(self.offsets) - 1)]
        self.calls += 1
        answers: dict[TopicPartition, Future[Any]] = {}
        for tp in request:
            future: Future[Any] = Future()
            future.set_result(type("Info", (), {"offset": offset})())
            answers[tp] = future
        return answers

    def poll(self, _timeout: float) -> int:
        return 0

    def list_topics(self, *_: Any, **__: Any) -> Any:
        self.refreshed += 1
        return type("Meta", (), {"topics": {}})()


def admin_answering(*offsets: int, budget: float = 3.0) -> tuple[Admin, Answers]:
    admin = Admin(ClientConfig("source", "admin", {"bootstrap.servers": "127.0.0.1:9"}),
                  retry_seconds=budget)
    answers = Answers(*offsets)
    admin._admin = answers  # type: ignore[assignment]
    return admin, answers


@pytest.mark.parametrize("call", ["watermarks", "ends"])
def test_an_invalid_offset_answered_while_a_leader_moves_is_asked_again(call: str) -> None:
    # given: the first answer is librdkafka's invalid offset, the next a real one
    admin, answers = admin_answering(-1001, 19_986)
    tp = TP("bounce", 0)

    # when
    found = getattr(admin, call)([tp])[tp]

    # then: the real offset, after asking again with the topic's metadata refreshed
    assert (found.high if call == "watermarks" else found) == 19_986
    assert answers.calls >= 2 and answers.refreshed >= 1


def test_an_invalid_offset_that_lasts_fails_naming_the_cluster_and_the_call() -> None:
    admin, _ = admin_answering(-1001, budget=1.0)
    with pytest.raises(TransientError, match=r"cluster source: reading high watermarks of "
                                             r"bounce.*no valid offset"):
        admin.ends([TP("bounce", 0)])


def test_an_offset_for_a_time_with_no_record_that_recent_is_an_answer_not_a_failure() -> None:
    # -1 for a timestamp look-up means "no record at or after it": the end is taken instead
    admin, _ = admin_answering(-1, 500)
    assert admin.offsets_at([TP("t", 0)], 1_000) == {TP("t", 0): 500}


class Sizes(Answers):
    """Answers every partition with offset 7, noting how many each call asked about."""

    def __init__(self) -> None:
        super().__init__(7)
        self.sizes: list[int] = []

    def list_offsets(self, request: dict[TopicPartition, Any], **kwargs: Any
                     ) -> dict[TopicPartition, Future[Any]]:
        self.sizes.append(len(request))
        return super().list_offsets(request, **kwargs)


@pytest.mark.parametrize(("partitions", "sizes"), [
    (1, [1]), (PER_CALL, [PER_CALL]), (PER_CALL + 1, [PER_CALL, 1]),
    (10_000, [PER_CALL] * 10)])
def test_offsets_of_many_partitions_are_asked_in_calls_of_at_most_a_thousand(
    partitions: int, sizes: list[int]
) -> None:
    # librdkafka's time for one ListOffsets grows with the square of its partitions:
    # 10,000 in one call took about 1 s of CPU, in calls of 1,000 about 0.15 s
    admin = Admin(ClientConfig("source", "admin", {"bootstrap.servers": "127.0.0.1:9"}))
    answers = Sizes()
    admin._admin = answers  # type: ignore[assignment]
    tps = [TP(f"t{n // 200}", n % 200) for n in range(partitions)]

    found = admin.last_stable(tps)

    assert answers.sizes == sizes
    assert found == dict.fromkeys(tps, 7)

"""A consumer's watermark answer is trusted only when it is an offset (`ferry.kafka.watermarks`):
librdkafka may answer -1001 without an error while a partition's leader moves."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.kafka.retry import RetriesExhausted, retrying
from ferry.kafka.watermarks import watermarks


class Answers:
    """A consumer whose watermark reads answer `answers` in turn (the last one for good)."""

    def __init__(self, *answers: tuple[int, int]) -> None:
        self.answers, self.asked = list(answers), 0

    def get_watermark_offsets(self, tp: Any, timeout: float = -1) -> tuple[int, int]:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.mark.parametrize(("answers", "expected", "asked"), [
    ([(0, 5)], (0, 5), 1),
    ([(-1001, -1001), (0, 5)], (0, 5), 2),
    ([(3, -1001), (-1001, 7), (3, 7)], (3, 7), 3),
    ([(0, 0)], (0, 0), 1),  # an empty partition is an answer
], ids=["an-answer", "no-offset-then-one", "half-answers-then-one", "empty-partition"])
def test_an_answer_that_is_no_offset_is_asked_again(
    answers: list[tuple[int, int]], expected: tuple[int, int], asked: int
) -> None:
    consumer = Answers(*answers)
    found = retrying(lambda: watermarks(consumer, "t", 0, 1.0),  # type: ignore[arg-type]
                     cluster="B", action="reading the end of t-0", budget_s=5)
    assert (found, consumer.asked) == (expected, asked)


def test_no_offset_past_the_budget_fails_naming_the_partition_never_reads_as_empty() -> None:
    consumer = Answers((-1001, -1001))
    with pytest.raises(RetriesExhausted) as failed:
        retrying(lambda: watermarks(consumer, "t", 4, 1.0),  # type: ignore[arg-type]
                 cluster="B", action="reading the end of t-4", budget_s=0.5)
    assert "t-4" in str(failed.value) and "cluster B" in str(failed.value)

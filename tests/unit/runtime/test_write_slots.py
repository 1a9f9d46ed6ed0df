"""A lane's decisions between two runs of one flow, without brokers: which writer slots it
starts, when it takes a slot back, when it stops, and what its `runs` rows say. The writers
are scripted (each run of a writer copies its ranges, or is fenced); the newest run is read
from a script too. The same decisions on real brokers: tests/integration/test_newest_run.py."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.config import Flow
from ferry.core.planner import Range
from ferry.core.tables import RangeOutcome
from ferry.core.takeover import Named
from ferry.errors import WriterTaken
from ferry.kafka.lane import Lane, LaneResult
from ferry.runtime.job import failures, handovers
from ferry.runtime.slots import write_slots
from tests.unit.conftest import BASE, Loader

ME, OTHER = "run-me", "run-other"


class Script:
    """What each writer does, in the order writers start ("copy" or "taken"), and what each
    read of the newest run answers, in order (the last answer repeats)."""

    def __init__(self, writers: list[str], newest: list[str | Named | None]) -> None:
        self.writers = list(writers)
        self.answers = [Named(a) if isinstance(a, str) else a for a in newest]
        self.started: list[tuple[int, list[int]]] = []
        """(slot, range starts) of each writer started."""

    def read(self) -> Named | None:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def writer(self) -> type[Lane]:
        script = self

        class Scripted(Lane):
            def run(self) -> LaneResult:
                script.started.append((self.lane, [r.start for r in self.results]))
                action = script.writers.pop(0)
                if action == "taken":
                    first = self.results[0]
                    first.outcome, first.records = RangeOutcome.COPIED, first.end - first.start
                    for r in self.results[1:]:
                        r.outcome, r.error = RangeOutcome.FAILED, "fenced"
                    raise WriterTaken("writer taken by a newer writer")
                for r in self.results:
                    r.outcome, r.records = RangeOutcome.COPIED, r.end - r.start
                return LaneResult(self.lane, self.results)

        return Scripted


@pytest.fixture
def flow(load: Loader) -> Flow:
    return load(BASE + "A->B.topics = orders\nferry.writers = 4\n").flow("A->B")


def slots_of(flow: Flow) -> list[tuple[int, list[Range]]]:
    """Two writer slots, each with two adjacent ranges of one partition."""
    from ferry.core.lanes import writer_of

    found: dict[int, int] = {}
    for p in range(16):
        found.setdefault(writer_of("orders", p, flow.ferry.writers), p)
    first, second = sorted(found)[:2]
    return [(slot, [Range("orders", found[slot], 0, 10), Range("orders", found[slot], 10, 20)])
            for slot in (first, second)]


def outcomes(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(r["outcome"], r["records"]) for r in rows]


def test_a_lane_of_the_newest_run_copies_every_slot(flow: Flow) -> None:
    script = Script(["copy", "copy"], [ME])
    rows = write_slots(flow, ME, slots_of(flow), "", script.writer(), script)
    assert outcomes(rows) == [("copied", 10)] * 4 and len(script.started) == 2


def test_a_lane_of_an_older_run_starts_no_slot_and_says_why_once(flow: Flow) -> None:
    script = Script([], [OTHER])
    rows = write_slots(flow, ME, slots_of(flow), "", script.writer(), script)
    assert script.started == []
    assert {r["outcome"] for r in rows} == {"handed-over"}  # a hand-over, not a failure
    assert failures(rows) == [] and len(handovers(rows)) == 1
    assert {r["error"] for r in rows} == {
        f"flow A->B: run {OTHER} of the flow started after this one and writes the same "
        "partitions, so this run left them to it (Kafka fenced this run's writers; nothing "
        "past their last commit was kept, nothing is doubled)"}


def test_a_slot_taken_from_the_newest_run_is_taken_back_once_for_what_is_left(
    flow: Flow
) -> None:
    script = Script(["taken", "copy", "copy"], [ME])
    (first, _), (second, _) = slots_of(flow)
    rows = write_slots(flow, ME, slots_of(flow), "", script.writer(), script)
    # the slot again from the range its first writer did not finish, then the next slot
    assert script.started == [(first, [0, 10]), (first, [10]), (second, [0, 10])]
    assert outcomes(rows) == [("copied", 10)] * 4


def test_a_slot_taken_while_another_run_is_newest_stops_the_lane(flow: Flow) -> None:
    script = Script(["taken"], [ME, OTHER])
    rows = write_slots(flow, ME, slots_of(flow), "", script.writer(), script)
    assert len(script.started) == 1
    assert outcomes(rows) == [("copied", 10), ("handed-over", 0), ("handed-over", 0),
                              ("handed-over", 0)]
    assert failures(rows) == []
    (line,) = handovers(rows)  # one line
    assert f"run {OTHER} of the flow started after this one" in line


def test_a_slot_taken_again_after_it_was_taken_back_stops_the_lane(flow: Flow) -> None:
    script = Script(["taken", "taken"], [ME, ME, OTHER])
    rows = write_slots(flow, ME, slots_of(flow), "", script.writer(), script)
    assert len(script.started) == 2  # taken back once, never a third time
    assert [r["outcome"] for r in rows] == ["copied", "copied", "handed-over", "handed-over"]


def test_with_no_newest_run_known_a_taken_slot_stops_the_lane_without_taking_it_back(
    flow: Flow
) -> None:
    script = Script(["taken"], [None])
    rows = write_slots(flow, ME, slots_of(flow), "", script.writer(), script)
    assert len(script.started) == 1
    assert [r["error"] for r in rows][1] == "fenced"
    # nobody newer to leave them to: a failure, as before
    assert [r["outcome"] for r in rows] == ["copied", "failed", "failed", "failed"]
    assert all(r["error"].startswith("not started: another writer of this run stopped")
               for r in rows[2:])


EARLY, LATE = Named("scheduled-1", 1_000), Named("scheduled-2", 2_000)  # continuous runs


def test_a_lane_of_a_later_continuous_run_takes_back_a_slot_the_earlier_one_named_again_took(
    flow: Flow
) -> None:
    # the earlier run read the name just before the later one named itself, named itself
    # again, and took a slot: the later run goes on all the same, and takes the slot back
    script = Script(["taken", "copy", "copy"], [EARLY])
    rows = write_slots(flow, "cycle-9", slots_of(flow), "", script.writer(), script,
                       owner=LATE)
    assert len(script.started) == 3
    assert outcomes(rows) == [("copied", 10)] * 4
    assert {r["run_id"] for r in rows} == {"cycle-9"}  # its rows are the cycle's


def test_a_lane_of_an_earlier_continuous_run_leaves_its_slots_to_the_later_one(
    flow: Flow
) -> None:
    script = Script([], [LATE])
    rows = write_slots(flow, "cycle-8", slots_of(flow), "", script.writer(), script,
                       owner=EARLY)
    assert script.started == []
    assert {r["outcome"] for r in rows} == {"handed-over"}
    assert all(f"run {LATE.run} of the flow started after this one" in r["error"]
               for r in rows)

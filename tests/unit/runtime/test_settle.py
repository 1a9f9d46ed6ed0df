"""A job reading back the offset-map entries it has just committed waits for them to be
readable, and what is still held back after the wait, or a target that does not answer
it, leaves those entries to the next job: said in one line, never a failed job (its copy
is done and committed)."""

from __future__ import annotations

import logging

import pytest

from ferry.config import Flow
from ferry.errors import TransientError
from ferry.kafka import mapreader
from ferry.runtime.recording import settle_entries
from tests.unit.conftest import BASE, Loader


@pytest.fixture
def flow(load: Loader) -> Flow:
    return load(BASE).flow("A->B")


def _answered(stable: int, written: int) -> object:
    def wait(flow: Flow, within: float) -> tuple[int, int]:
        return stable, written
    return wait


def _unanswered(flow: Flow, within: float) -> tuple[int, int]:
    raise TransientError("cluster B: reading last stable offsets failed: timed out")


@pytest.mark.parametrize(("wait", "said"), [
    (_answered(12, 12), None),  # every entry readable: nothing to say
    (_answered(7, 12), "ferry-offset-map.A.internal: last stable offset 7 still behind 12 "
                       "after 10 s (a transaction open below 12, or its commit markers not "
                       "yet written): the entries from 7 on are left to the next job"),
    (_unanswered, "could not read how far ferry-offset-map.A.internal is readable (cluster "
                  "B: reading last stable offsets failed: timed out): its newest entries "
                  "may be left to the next job"),
])
def test_entries_not_readable_after_the_wait_are_left_to_the_next_job_in_one_warning(
    flow: Flow, wait: object, said: str | None, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(mapreader, "wait_stable", wait)
    with caplog.at_level(logging.INFO, "ferry.runtime.recording"):
        settle_entries(flow, 10.0)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == ([] if said is None else [("WARNING", said)])

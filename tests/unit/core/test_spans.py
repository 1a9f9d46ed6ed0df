"""Each @continuous flow's runs have a span of their own, near the configured one, so many
flows do not end and restart together."""

from __future__ import annotations

import pytest

from ferry.core.spans import SPREAD, longest_span, run_end, run_span


@pytest.mark.parametrize("seconds", [60.0, 300.0, 600.0])
def test_a_flows_span_is_within_the_spread_of_the_configured_one_and_never_beyond_the_longest(
    seconds: float
) -> None:
    spans = [run_span(f"s{i}->target", seconds) for i in range(200)]
    assert all(seconds * (1 - SPREAD) <= s <= longest_span(seconds) for s in spans)


def test_every_run_of_a_flow_has_the_same_span() -> None:
    assert run_span("onprem->cloud", 600) == run_span("onprem->cloud", 600)


def test_twenty_flows_named_alike_end_their_runs_spread_over_the_window() -> None:
    # given: twenty flows with the same configured span, as in one mm2.properties
    spans = sorted(run_span(f"s{i}->target", 300.0) for i in range(20))

    # then: their turns are spread over most of the window, none on top of another
    assert spans[-1] - spans[0] > 0.5 * (2 * SPREAD * 300)
    assert len({round(s) for s in spans}) >= 15


@pytest.mark.parametrize(("since", "now", "end"), [
    (1_000.0, 1_002.0, 1_000.0 + 300 + 60),  # on time: the next run is due at since + span
    (1_000.0, 1_250.0, 1_000.0 + 300 + 60),  # started late: the same end
    (1_000.0, 1_500.0, 1_500.0 + 60),        # a retry after the next run was due
])
def test_a_run_copies_until_its_hand_over_time_past_its_next_runs_time_or_its_start(
    since: float, now: float, end: float
) -> None:
    assert run_end(since, 300.0, 60.0, now) == end

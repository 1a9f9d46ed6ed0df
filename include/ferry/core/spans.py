"""How long one run of an @continuous flow mirrors before it ends (pure).

Airflow starts a flow's next run every span, and a run's start costs a task process, a
session and a first cycle with every step due. Flows configured alike would all turn
together, every `ferry.continuous.run.seconds`: twenty flows on two cores then queued for
tens of seconds at each turn. So each flow's span is its own, within SPREAD of the
configured one, fixed by the flow's name: the turns of many flows stay apart.

A run copies on past its span while the next one starts (`run_end`), and hands over to it
as soon as it is named the flow's newest (`ferry.core.takeover`).
"""

from __future__ import annotations

import zlib

SPREAD = 0.1
"""A flow's span is within this fraction of `ferry.continuous.run.seconds`, either way."""


def run_span(flow: str, seconds: float) -> float:
    """The span of each run of `flow` (`seconds` configured): the same for every run of the
    flow, within SPREAD of `seconds`, and spread evenly over flows by a hash of the name."""
    share = (zlib.crc32(flow.encode()) % 1001) / 1000  # 0.0 .. 1.0
    return seconds * (1 - SPREAD + 2 * SPREAD * share)


def longest_span(seconds: float) -> float:
    """The longest span any flow's run may have (`seconds` configured)."""
    return seconds * (1 + SPREAD)


def run_end(since: float, span: float, handover: float, now: float) -> float:
    """When a run of an @continuous flow stops copying at the latest (epoch seconds), its
    next run not come: `handover` seconds past the next run's time, `since + span` (`since`:
    this run's time, its DAG run's `run_after`), or past `now` for a run that starts after
    that (a retry, a scheduler that was late): its next run is due by then."""
    return max(since + span, now) + handover

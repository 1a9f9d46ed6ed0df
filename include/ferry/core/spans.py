"""How long one run of an @continuous flow mirrors before it ends (pure).

Airflow's continuous schedule starts a flow's next run as one ends, and a run's start
costs a task process, a session and a first cycle with every step due. Flows configured
alike would all end and start together, every `ferry.continuous.run.seconds`: twenty flows
on two cores then queued for tens of seconds at each turn. So each flow's span is its own,
within SPREAD of the configured one, fixed by the flow's name: the turns of many flows
drift apart after their first runs and stay apart.
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

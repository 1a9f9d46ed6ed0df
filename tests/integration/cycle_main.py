"""Run one in-process mirror cycle for a config and flow (a killable child process).

`python -m tests.integration.cycle_main CONFIG FLOW [--hold-first-commit]`: with the flag,
the first writer stops for good at its first commit, its records sent and its positions not
committed, so a kill that follows always lands mid-batch, however fast the copy ran."""

from __future__ import annotations

import sys
import threading
from typing import Any

from ferry.config import load_config
from ferry.core.lanes import by_writer
from ferry.kafka.lane import Lane, Part
from ferry.steps.plan import prepare


class HeldAtCommit(Lane):
    """A writer that never gets past its first commit (it waits to be killed)."""

    def commit(self, producer: Any, metadata: Any, parts: list[Part]) -> None:
        producer.flush(30)  # every record sent is written: the batch is whole, uncommitted
        threading.Event().wait()


def main(config: str, flow_name: str, hold: bool = False) -> None:
    flow = load_config(config).flow(flow_name)
    prepared = prepare(flow)
    writer = HeldAtCommit if hold else Lane
    for ranges in by_writer(prepared.plan.ranges, flow.ferry.writers).values():
        writer(flow, ranges, prepared.run_id).run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], hold="--hold-first-commit" in sys.argv[3:])

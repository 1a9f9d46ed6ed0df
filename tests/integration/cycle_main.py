"""Run one in-process mirror cycle for a config and flow (a killable child process)."""

from __future__ import annotations

import sys

from ferry.config import load_config
from ferry.core.lanes import by_writer
from ferry.kafka.lane import Lane
from ferry.steps.mirror import prepare


def main(config: str, flow_name: str) -> None:
    flow = load_config(config).flow(flow_name)
    prepared = prepare(flow)
    for ranges in by_writer(prepared.plan.ranges, flow.ferry.writers).values():
        Lane(flow, ranges, prepared.run_id).run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

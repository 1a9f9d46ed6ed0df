"""Run one in-process mirror cycle for a config and flow (a killable child process)."""

from __future__ import annotations

import sys

from ferry.config import load_config
from ferry.core.lanes import assign
from ferry.kafka.lane import Lane
from ferry.steps.mirror import prepare


def main(config: str, flow_name: str) -> None:
    flow = load_config(config).flow(flow_name)
    prepared = prepare(flow)
    for lane, ranges in assign(prepared.plan.ranges, prepared.lanes).items():
        Lane(flow, lane, ranges, prepared.run_id, lanes=prepared.lanes).run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

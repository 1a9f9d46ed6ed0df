"""The local copy runner: a cycle's lanes as threads of its own process (adapter).

The plan goes to the lanes as the cycle made it: no plan file, no snapshot of the Airflow
connections (the flow in hand already holds its clusters' settings). The lanes are the
writers Spark's tasks run (`ferry.runtime.slots`), one thread per lane; the job's shape is
the runners' common one (`ferry.runtime.job.copy_plan`), its rows appended with delta-rs at
the end of the job, or, in a continuous loop that keeps a recorder, behind the copies. Why
two runners, and which a cycle gets: `ferry.core.runners`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferry.core.job import Copied
from ferry.runtime.job import copy_plan, reported
from ferry.runtime.kept_lanes import KeptLanes

if TYPE_CHECKING:
    from ferry.config import Flow
    from ferry.core.plan_file import PlanFile
    from ferry.runtime.recording import RecordsBehind


@dataclass(frozen=True)
class LocalRunner:
    """The copy-runner port (`ferry.steps.ports.CopyRunner`) in this process. `lanes`: a
    continuous loop's lanes, their clients kept from one cycle to the next (None: lanes of
    this job alone, their clients closed at its end). `recorder`: a loop's Delta recorder,
    which appends the job's rows behind the copy (None: appended before `run` returns)."""

    flow: Flow
    lanes: KeptLanes | None = None
    recorder: RecordsBehind | None = None

    reads_plan_file = False
    """The plan goes to the lanes in hand: the cycle writes no plan file for it."""

    def run(self, plan: PlanFile, plan_path: str | None = None) -> Copied:
        """Copy `plan` and record it; its outcome printed to stderr as a Spark job's is
        (`ferry.runtime.job.reported`). `plan_path` is not read."""
        from ferry.state.writer import append

        lanes = self.lanes or KeptLanes(self.flow)
        try:
            return reported(lambda: copy_plan(plan, self.flow, lanes, append=append,
                                              recorder=self.recorder),
                            self.flow, out=sys.stderr)
        finally:
            if self.lanes is None:
                lanes.close()

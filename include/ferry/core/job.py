"""What a copy job hands back to the cycle that ran it: its exit code and the run as it
recorded it, so the cycle reports the run without reading the `runs` table back.

The job runs in the cycle's own process on a Spark Connect server, or in a spark-submit
process of its own: there it leaves its summary in a result file beside its plan
(`result_path`), which the runner reads once the process has exited. A job that left none
(it died first) is reported from Delta instead (`ferry.steps.cycle.Cycle.record`). Pure,
apart from `write_result`/`read_result`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.core.tables import RangeOutcome, copied_topics

RESULT_SUFFIX = ".result.json"
VERSION = 1
"""The result file's format; a reader takes no other (the run is then read from Delta)."""


@dataclass(frozen=True)
class Copied:
    """A copy job's outcome as its runner hands it back: the exit code (0; 1 for a failed
    lane or a gap that fails the run; 2 for bad config) and the run as the job recorded it
    (`run_summary`), None when the job left none."""

    exit_code: int
    summary: dict[str, Any] | None = None


def run_summary(run_id: str, runs: Sequence[Mapping[str, Any]], gaps: int) -> dict[str, Any]:
    """The run as recorded, from its final `runs` rows (one per range) and the number of
    gaps recorded under its id: what `ferry mirror` prints and the DAG's `finish` returns.
    `failed` names the partitions of ranges that failed, `handed_over` those left to a
    newer run of the flow (no failure: `ferry.core.takeover`)."""
    return {"run_id": run_id, "ranges": len(runs),
            "records": sum(r["records"] for r in runs),
            "bytes": sum(r["bytes"] for r in runs),
            "failed": [f"{r['topic']}-{r['partition']}" for r in runs
                       if r["outcome"] == RangeOutcome.FAILED],
            "handed_over": [f"{r['topic']}-{r['partition']}" for r in runs
                            if r["outcome"] == RangeOutcome.HANDED_OVER],
            "gaps": gaps,
            "topics": copied_topics(runs)}


def result_path(plan_path: str) -> str:
    """Where the job of `plan_path` leaves its result."""
    return str(Path(plan_path).with_suffix("")) + RESULT_SUFFIX


def write_result(plan_path: str, summary: dict[str, Any]) -> None:
    """Leave `summary` beside the plan, whole or not at all (written aside, then renamed)."""
    path = result_path(plan_path)
    partial = f"{path}.{os.getpid()}.partial"
    Path(partial).write_text(json.dumps({"version": VERSION, "summary": summary}))
    os.replace(partial, path)


def read_result(plan_path: str) -> dict[str, Any] | None:
    """The summary the job of `plan_path` left, None when there is none (or not one this
    Ferry writes); the file is removed once read."""
    path = Path(result_path(plan_path))
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    if not isinstance(found, dict) or found.get("version") != VERSION:
        return None
    summary = found.get("summary")
    return summary if isinstance(summary, dict) else None

"""Run one Spark copy job that stops for good right after its `runs` commit (a killable
child process).

`python -m tests.integration.copy_job_main CONFIG FLOW PLAN MARKER`: the job copies the plan,
appends its runs rows to Delta, writes MARKER and waits to be killed, so a SIGKILL always
lands between the job's two Delta commits (runs, then offset map), however fast it ran."""

from __future__ import annotations

import faulthandler
import sys
import threading
from pathlib import Path
from typing import Any

from ferry.config import load_config
from ferry.spark import copy_job
from ferry.spark.session import build_session


def main(config: str, flow_name: str, plan: str, marker: str) -> None:
    faulthandler.enable()
    flow = load_config(config).flow(flow_name)
    append = copy_job._append

    def append_then_wait(*args: Any, **kwargs: Any) -> bool:
        done = append(*args, **kwargs)
        if Path(str(args[3])).name == "runs":
            Path(marker).write_text("runs committed\n")
            threading.Event().wait()  # the offset map's commit never comes
        return done

    copy_job._append = append_then_wait  # type: ignore[assignment]
    copy_job.run_copy_job(build_session("local[2]", "ferry-killed-job"), config, flow, plan)


if __name__ == "__main__":
    main(*sys.argv[1:5])

"""A whole mirror cycle outside Airflow (`ferry mirror`), on the DAG's code path:
prepare (topology, plan) -> when there is work, spark-submit the copy job -> its exit code.

An idle cycle (nothing to copy, no gap, offset map up to date) starts no JVM.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ferry.config import Flow
from ferry.errors import TerminalError
from ferry.mirror import Prepared, prepare

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CycleResult:
    prepared: Prepared
    ran_job: bool
    exit_code: int
    plan_path: str | None
    offset_map_lag: int


def offset_map_lag(flow: Flow) -> int:
    """Committed offset-map entries on the target not yet in the Delta offset map."""
    from ferry.internal import offset_map_topic
    from ferry.kafka.admin import Admin
    from ferry.kafka.mapreader import read_entries
    from ferry.lookup import map_cursor
    from ferry.planner import TopicPartition

    topic = offset_map_topic(flow)
    target = Admin(flow.target_admin)
    cursor = map_cursor(flow, target)
    if not cursor.topic_id:
        return 0
    end = target.watermarks([TopicPartition(topic, 0)])[TopicPartition(topic, 0)].high
    recorded = cursor.after
    if end <= recorded + 2:  # at most the commit marker after the last recorded entry
        return 0
    # Markers and aborted entries also take offsets: count what is really committed.
    return sum(1 for _ in read_entries(flow, recorded))


def needs_job(prepared: Prepared, lag: int) -> bool:
    return bool(prepared.plan.ranges or prepared.plan.gaps or lag > 0)


def plans_dir(flow: Flow) -> Path:
    state = flow.ferry.state_dir
    base = Path(state) if "://" not in state else Path(tempfile.gettempdir()) / "ferry-state"
    return base / "plans" / flow.dag_id


def write_plan(flow: Flow, prepared: Prepared) -> str:
    """The plan file the copy job reads (no secrets in it)."""
    folder = plans_dir(flow)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{prepared.run_id}.json"
    path.write_text(json.dumps(prepared.to_json(), indent=2))
    return str(path)


def run(config_path: str, flow: Flow, master: str | None = None) -> CycleResult:
    """One cycle: prepare, then the copy job when there is work. Job output goes to stderr."""
    from ferry.spark.submit import submit_command, submit_env

    master = master or flow.ferry.spark_master
    prepared = prepare(flow, master=master)
    lag = offset_map_lag(flow)
    if not needs_job(prepared, lag):
        log.info("nothing to copy: idle cycle, no job started", extra={"flow": flow.name})
        return CycleResult(prepared, False, 0, None, 0)
    plan_path = write_plan(flow, prepared)
    command = submit_command(str(Path(config_path).resolve()), flow.name, plan_path, master)
    log.info("starting the copy job: %d ranges, %d offsets, %d gaps",
             len(prepared.plan.copies), prepared.plan.span, len(prepared.plan.gaps),
             extra={"flow": flow.name})
    try:
        code = subprocess.run(command, env=submit_env(), stdout=sys.stderr,
                              check=False).returncode
    except FileNotFoundError:
        raise TerminalError(f"cannot run {command[0]}: is pyspark installed in this "
                            "environment? (scripts/setup.sh installs it)") from None
    return CycleResult(prepared, True, code, plan_path, lag)

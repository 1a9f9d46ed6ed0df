"""spark-submit entry point of the copy job.

    spark-submit [options] .../ferry/jobs/ferry_copy.py --config mm2.properties --flow A->B \
        --plan p.json

Parses the arguments, builds the session, runs `ferry.spark.copy_job.run_and_report`,
leaves the run as recorded beside the plan for the cycle that submitted it
(`ferry.core.job.result_path`) and exits 0 on success, 1 when a lane failed or the plan
found a gap that fails the run (`ferry.on.gap=fail`), 2 for bad arguments or config; one
line per problem, no traceback.
(A Spark Connect master runs the same `run_and_report` in the cycle's own process.)
"""

from __future__ import annotations

import argparse
import logging
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from ferry import crash

    crash.enable()  # a native crash in the driver prints its Python stack
    parser = argparse.ArgumentParser(prog="ferry_copy.py")
    parser.add_argument("--config", required=True)
    parser.add_argument("--flow", required=True)
    parser.add_argument("--plan", required=True)
    args = parser.parse_args(argv)

    from ferry.config.connections import remove_snapshot

    try:
        return _run(args)
    finally:  # however the job ends, its connections' snapshot goes with it
        remove_snapshot(args.plan)


def _run(args: argparse.Namespace) -> int:
    from ferry import logs
    from ferry.core.job import write_result
    from ferry.errors import UsageError
    from ferry.spark.copy_job import load_flow, run_and_report
    from ferry.spark.session import build_session

    try:
        logs.setup()
    except UsageError as exc:
        print(f"ferry copy job: {exc}", file=sys.stderr)
        return 2
    flow = load_flow(args.config, args.flow, args.plan)
    if flow is None:
        return 2
    started = time.monotonic()
    spark = build_session(master=None, app_name=f"ferry-copy {args.flow}")
    # where a slow job's time went: on a loaded machine the session alone took minutes
    logging.getLogger("ferry.jobs").info("Spark session ready in %.1f s",
                                         time.monotonic() - started, extra={"flow": flow.name})
    try:
        copied = run_and_report(spark, args.config, flow, args.plan)
    finally:
        spark.stop()
    if copied.summary is not None:  # for the cycle that submitted this job
        write_result(args.plan, copied.summary)
    return copied.exit_code


if __name__ == "__main__":
    from ferry import crash

    crash.exit_now(main())  # not sys.exit: see there

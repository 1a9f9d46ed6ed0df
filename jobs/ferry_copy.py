"""spark-submit entry point of the copy job.

    spark-submit [options] jobs/ferry_copy.py --config mm2.properties --flow A->B --plan p.json

Parses the arguments, builds the session, runs `ferry.spark.copy_job.run_copy_job` and
exits 0 on success, 1 when a lane failed or the plan found a gap that fails the run
(`ferry.on.gap=fail`), 2 for bad arguments or config; one line per problem, no traceback.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from ferry import crash

    crash.enable()  # a native crash in the driver prints its Python stack
    parser = argparse.ArgumentParser(prog="jobs/ferry_copy.py")
    parser.add_argument("--config", required=True)
    parser.add_argument("--flow", required=True)
    parser.add_argument("--plan", required=True)
    args = parser.parse_args(argv)

    from ferry import logs
    from ferry.config import load_config
    from ferry.errors import ConfigError, FerryError
    from ferry.spark.copy_job import run_copy_job
    from ferry.spark.session import build_session
    from ferry.steps.mirror import describe_gaps

    logs.setup()
    try:
        flow = load_config(args.config).flow(args.flow)
    except (ConfigError, KeyError) as exc:
        print(f"ferry copy job: {exc}", file=sys.stderr)
        return 2
    spark = build_session(master=None, app_name=f"ferry-copy {args.flow}")
    try:
        result = run_copy_job(spark, args.config, flow, args.plan)
    except FerryError as exc:
        print(f"ferry copy job: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(f"ferry copy job: flow {args.flow} run {result.run_id}: {result.records} records in "
          f"{result.ranges} ranges, {result.offset_map_rows} offset-map rows recorded, "
          f"{len(result.gaps)} gaps")
    for failure in result.failed:
        print(f"ferry copy job: failed: {failure}", file=sys.stderr)
    if result.failed:
        return 1
    if result.gaps and flow.ferry.on_gap == "fail":
        print(f"ferry copy job: records deleted by retention before they were mirrored: "
              f"{describe_gaps(result.gaps)} (recorded in the gaps table; set "
              f"{args.flow}.ferry.on.gap=continue to copy on from the oldest record)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

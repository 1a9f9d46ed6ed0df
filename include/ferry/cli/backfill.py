"""`ferry backfill`: copy a window of a flow's source topics in chunks (the ferry_backfill
DAG without Airflow)."""

from __future__ import annotations

import argparse

from ferry.cli.verbs import (
    DRY_RUN_NOTE,
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    config_and_flow,
    emit,
    execute_options,
    flow_verb,
)


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    backfill = flow_verb(subparsers, "backfill", "copy a window of a flow's source topics in "
                         "chunks (the ferry_backfill DAG without Airflow)", cmd_backfill,
                         ("mm2.properties --flow 'A->B' --topics 'orders' "
                          "--from 2026-11-26T08:00:00Z --to latest "
                          "--target-topic 'investigation.{topic}'   # show the chunks",
                          "mm2.properties --flow A_to_B --from 1200 --to 5000 --execute"))
    backfill.add_argument("--topics", default=".*",
                          help="regex over the flow's source topics (default: all)")
    backfill.add_argument("--from", dest="start", default="earliest",
                          help="earliest, a source offset, or an ISO time (UTC if no zone)")
    backfill.add_argument("--to", dest="end", default="latest",
                          help="latest, a source offset, or an ISO time (exclusive)")
    backfill.add_argument("--target-topic", default="",
                          help="a topic of its own, e.g. 'investigation.{topic}' (default: the "
                               "flow's remote topic)")
    backfill.add_argument("--chunk-records", type=int, default=100_000,
                          help="offsets per partition in one chunk")
    backfill.add_argument("--on-gap", choices=["fail", "continue"], default="fail")
    backfill.add_argument("--master", help="Spark master (default: ferry.spark.master)")
    execute_options(backfill, "copy the window")


def cmd_backfill(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ferry.steps.backfill import BackfillRequest, copy_chunks, prepare_backfill
    from ferry.steps.plan import new_run_id

    config, flow = config_and_flow(args)
    master = args.master or flow.ferry.spark_master
    request = BackfillRequest(topics=args.topics, start=args.start, end=args.end,
                              target_topic=args.target_topic, chunk_records=args.chunk_records,
                              on_gap=args.on_gap)
    dry_run = not args.execute
    run = prepare_backfill(flow, request, f"backfill.{new_run_id()}", master,
                           apply=not dry_run)
    code = EXIT_OK
    if not dry_run and run.chunk_files:
        code = copy_chunks(str(Path(args.file).resolve()), flow, run, master,
                           config.connections)
    data = run.summary() | {"dry_run": dry_run, "job_exit_code": code}
    verdict = DRY_RUN_NOTE if dry_run else \
        ("copied" if code == EXIT_OK else f"FAILED (exit {code})")
    emit(args, data, f"{run.text()}\n{verdict}")
    return EXIT_OK if code == EXIT_OK else EXIT_FAILED

"""`ferry maintain`: compact and vacuum the Delta state tables (the ferry_maintenance DAG
without Airflow)."""

from __future__ import annotations

import argparse

from ferry.cli.verbs import DRY_RUN_NOTE, EXIT_OK, Parser, config_verb, emit, execute_options


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    maintain = config_verb(subparsers, "maintain", "compact and vacuum the Delta state tables "
                           "(the ferry_maintenance DAG without Airflow)", cmd_maintain)
    maintain.add_argument("--retention-hours", type=int, default=168,
                          help="keep replaced files this long (at least 24; default 168)")
    execute_options(maintain, "compact and vacuum")


def cmd_maintain(args: argparse.Namespace) -> int:
    from ferry.config import load_config
    from ferry.state.maintain import maintain

    report = maintain(load_config(args.file), args.retention_hours, not args.execute)
    emit(args, report.to_json(),
         report.text() + ("" if args.execute else f"\n{DRY_RUN_NOTE}"))
    return EXIT_OK

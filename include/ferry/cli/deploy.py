"""Putting an installed Ferry into an Airflow and a Prometheus: `dag-file` gives the DAG
file that Airflow's DAG folder needs (the plugin and the provider come with the package's
entry points); `rules` the alert rules, linked to the runbook the Ferry page serves."""

from __future__ import annotations

import argparse
from pathlib import Path

from ferry.cli.verbs import EXIT_OK, Parser, emit, verb

DAG_FILE = "ferry_flows.py"


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    parser = verb(subparsers, "dag-file", "print Ferry's DAG file for Airflow's DAG folder "
                  "(one DAG per flow of $FERRY_CONFIG), or --write it there", cmd_dag_file,
                  ("> $AIRFLOW_HOME/dags/ferry_flows.py",
                   "--write $AIRFLOW_HOME/dags   # the same, as ferry_flows.py"))
    parser.add_argument("--write", metavar="DIR",
                        help=f"write it into the folder DIR as {DAG_FILE} (replacing it)")
    rules = verb(subparsers, "rules", "print Ferry's Prometheus alert rules, each alert's "
                 "runbook_url its section of the runbook on the Ferry page", cmd_rules,
                 ("--runbook-url https://airflow.example.com/ferry/runbook > ferry-rules.yml",
                  "--kubernetes > ferry-prometheusrule.yaml   # a PrometheusRule"))
    rules.add_argument("--runbook-url", metavar="URL",
                       help="where the runbook is served (default: $AIRFLOW__API__BASE_URL"
                            "/ferry/runbook, else the demo's http://localhost:8080/ferry/runbook)")
    rules.add_argument("--kubernetes", action="store_true",
                       help="as a PrometheusRule resource for the Prometheus Operator")


def source() -> Path:
    """The DAG file inside the installed package (read as a file: the CLI does not import
    the Airflow layer)."""
    import ferry

    return Path(ferry.__file__).resolve().parent / "airflow" / DAG_FILE


def cmd_dag_file(args: argparse.Namespace) -> int:
    from ferry.errors import UsageError

    text = source().read_text()
    written = None
    if args.write:
        folder = Path(args.write)
        if not folder.is_dir():
            raise UsageError(f"--write {args.write}: no such folder; create Airflow's DAG "
                             "folder first, or name another")
        written = folder / DAG_FILE
        written.write_text(text)
    if args.json:
        emit(args, {"source": str(source()), "written": str(written) if written else None,
                    "text": text}, "")
    elif written:
        print(f"wrote {written}; Airflow reads FERRY_CONFIG from its environment")
    else:
        print(text, end="")
    return EXIT_OK


def cmd_rules(args: argparse.Namespace) -> int:
    import os

    from ferry.observe.rules import (
        AIRFLOW_URL_ENV,
        alert_rules,
        check_url,
        prometheus_rule,
        runbook_url,
    )

    runbook = check_url(args.runbook_url or runbook_url(os.environ.get(AIRFLOW_URL_ENV)))
    text = prometheus_rule(runbook) if args.kubernetes else alert_rules(runbook)
    emit(args, {"runbook_url": runbook, "kubernetes": args.kubernetes, "text": text},
         text.rstrip("\n"))
    return EXIT_OK

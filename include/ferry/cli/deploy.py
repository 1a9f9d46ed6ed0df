"""Putting an installed Ferry into an Airflow: `dag-file` gives the DAG file that Airflow's
DAG folder needs (the plugin and the provider come with the package's entry points)."""

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

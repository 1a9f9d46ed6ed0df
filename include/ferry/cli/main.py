"""`ferry` — the command line.

Exit codes: 0 success; 1 the work failed (a broker down, a job failed); 2 a usage or
config error (one line per problem, no traceback). Every verb takes `--json`.

Each verb group is a module of `cli/` that adds its subparsers and holds their handlers;
this module builds the parser from them and is the error edge.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ferry import __version__, crash, logs
from ferry.cli import (
    backfill,
    completion,
    deploy,
    flows,
    local,
    maintain,
    observe,
    offsets,
    spark,
)
from ferry.cli.verbs import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Handler, Parser, resolve_config
from ferry.errors import ConfigError, FerryError, TerminalError, UsageError

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "run"]

GROUPS = (flows, offsets, backfill, observe, maintain, local, spark, deploy, completion)
"""The verb groups, in the order `ferry --help` lists them: the verbs of a flow's runs first,
then offsets and failover, backfills, watching, housekeeping, the local clusters and Spark,
the DAG file for an Airflow, and shell completion."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ferry", description="Exact-offset Kafka mirroring, MM2-compatible.")
    parser.add_argument("--version", action="version", version=f"ferry {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for group in GROUPS:
        group.add_parsers(subparsers)
    return parser


def _fail(args: argparse.Namespace | None, code: int, lines: list[str],
          data: dict[str, Any]) -> int:
    if args is not None and getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    else:
        json_lines = _log_format() == "json"
        for line in lines:
            print(_json_line(line) if json_lines else f"ferry: {line}", file=sys.stderr)
    return code


def _log_format() -> str:
    try:
        return logs.log_format()
    except UsageError:  # that mistake is the line being reported
        return "text"


def _json_line(line: str) -> str:
    """The final error line as the log lines before it are written (`FERRY_LOG_FORMAT=json`)."""
    record = logging.LogRecord("ferry", logging.ERROR, __file__, 0, line, None, None)
    return logs.JsonFormatter().format(record)


def main(argv: Sequence[str] | None = None) -> int:
    from ferry.cli.render import problems_json

    crash.enable()
    args: argparse.Namespace | None = None
    wants_json = "--json" in (sys.argv[1:] if argv is None else list(argv))
    try:
        parser = build_parser()
        completion.offer(parser)
        args = parser.parse_args(argv)
        logs.setup(getattr(args, "verbose", False))
        resolve_config(args)
        func: Handler = args.func
        return func(args)
    except ConfigError as exc:
        args = args or argparse.Namespace(json=wants_json)
        where = f"{exc.source}: " if exc.source else ""
        return _fail(args, EXIT_USAGE, [where + p.line() for p in exc.problems],
                     problems_json(exc.problems, exc.source))
    except UsageError as exc:
        args = args or argparse.Namespace(json=wants_json)
        return _fail(args, EXIT_USAGE, [str(exc)], {"ok": False, "error": str(exc)})
    except TerminalError as exc:
        return _fail(args, EXIT_FAILED, [str(exc)], {"ok": False, "error": str(exc)})
    except FerryError as exc:
        return _fail(args, EXIT_FAILED, [str(exc)], {"ok": False, "error": str(exc)})
    except KeyboardInterrupt:
        return _fail(args, 130, ["interrupted"], {"ok": False, "error": "interrupted"})
    except BrokenPipeError:
        return _closed_pipe()


EXIT_CLOSED_PIPE = 141
"""128 + SIGPIPE: how a command ends when its reader went away (`ferry validate | head`)."""


def _closed_pipe() -> int:
    """The reader of stdout went away: nothing more can be said there, and nothing is
    wrong. Later writes (the final flush) go to /dev/null instead of raising again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_CLOSED_PIPE


def run() -> NoReturn:
    """The console script: `main`, then exit at once with its code (`crash.exit_now`)."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _closed_pipe()
    crash.exit_now(code)


if __name__ == "__main__":
    run()

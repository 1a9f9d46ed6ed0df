"""What every `ferry` verb shares: the exit codes, the parser whose usage error is one line,
the `--json`/`-v` options, the `file --flow` arguments and their lookup, and the output.

A verb group (`cli/flows.py`, `cli/offsets.py`, ...) adds its subparsers with `verb` or
`flow_verb` and gives each its handler: `(args) -> exit code`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, NoReturn

from ferry.errors import UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace], int]


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the fix (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _common() -> Parser:
    """The options every verb takes (a parent parser)."""
    common = Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return common


def verb(subparsers: argparse._SubParsersAction[Parser], name: str, help_text: str,
         func: Handler) -> Parser:
    """A verb with the common options, run by `func`."""
    parser = subparsers.add_parser(name, parents=[_common()], help=help_text)
    parser.set_defaults(func=func)
    return parser


def flow_verb(subparsers: argparse._SubParsersAction[Parser], name: str, help_text: str,
              func: Handler) -> Parser:
    """A verb on one flow of a config: `file --flow A->B`."""
    parser = verb(subparsers, name, help_text, func)
    parser.add_argument("file", help="the config (mm2.properties or Strimzi YAML)")
    parser.add_argument("--flow", required=True, help="the flow, e.g. A->B")
    return parser


def config_verb(subparsers: argparse._SubParsersAction[Parser], name: str, help_text: str,
                func: Handler) -> Parser:
    """A verb on a whole config: `file`."""
    parser = verb(subparsers, name, help_text, func)
    parser.add_argument("file", help="the config (mm2.properties or Strimzi YAML)")
    return parser


def config_and_flow(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the config, its enabled flow `--flow`); a usage error names the flows there are."""
    from ferry.config import load_config

    config = load_config(args.file)
    try:
        flow = config.flow(args.flow)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    if not flow.enabled:
        raise UsageError(f"flow {args.flow} is not enabled: set {args.flow}.enabled=true")
    return config, flow


def enabled_flow(args: argparse.Namespace) -> Any:
    """The enabled flow `--flow` of the config `file`."""
    return config_and_flow(args)[1]


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """`data` as JSON with `--json`, else `text`."""
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        print(text)

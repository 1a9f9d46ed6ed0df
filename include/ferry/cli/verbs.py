"""What every `ferry` verb shares: the exit codes, the parser whose usage error is one line,
the `--json`/`-v` options, the `file --flow` arguments and their lookup, and the output.

A verb group (`cli/flows.py`, `cli/offsets.py`, ...) adds its subparsers with `verb` or
`flow_verb` and gives each its handler: `(args) -> exit code`.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any, NoReturn

from ferry.errors import UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_MISMATCH = 3
"""`ferry verify` found records that differ: the check itself worked (1 is kept for a check
that failed)."""

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


EXIT_CODES = ("exit codes: 0 done, 1 the operation failed (one line says why), 2 a usage or "
              "config error")


def verb(subparsers: argparse._SubParsersAction[Parser], name: str, help_text: str,
         func: Handler, examples: tuple[str, ...] = (), extra_codes: str = "") -> Parser:
    """A verb with the common options, run by `func`; its --help shows `help_text`, the
    `examples` and the exit codes."""
    parser = subparsers.add_parser(name, parents=[_common()], help=help_text,
                                   description=help_text[:1].upper() + help_text[1:] + ".",
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    shown = ["examples:", *(f"  {parser.prog} {e}" for e in examples), ""] if examples else []
    parser.epilog = "\n".join([*shown, EXIT_CODES + extra_codes])
    parser.set_defaults(func=func, verb_prog=parser.prog)
    return parser


def flow_verb(subparsers: argparse._SubParsersAction[Parser], name: str, help_text: str,
              func: Handler, examples: tuple[str, ...] = (), extra_codes: str = "",
              without_flow: str = "") -> Parser:
    """A verb on one flow of a config: `file --flow A->B`; `without_flow` says what the verb
    does when `--flow` is left out (else it is required)."""
    parser = verb(subparsers, name, help_text, func,
                  examples or ("mm2.properties --flow 'A->B'",), extra_codes)
    config_argument(parser)
    parser.add_argument("--flow", required=not without_flow,
                        help="the flow: 'A->B' (quoted: > is a shell redirect), or its DAG id, "
                             "ferry_A_to_B or A_to_B" + (f"; {without_flow}" if without_flow
                                                         else ""))
    return parser


def config_verb(subparsers: argparse._SubParsersAction[Parser], name: str, help_text: str,
                func: Handler, examples: tuple[str, ...] = ()) -> Parser:
    """A verb on a whole config: `file`."""
    parser = verb(subparsers, name, help_text, func, examples or ("mm2.properties",))
    config_argument(parser)
    return parser


def execute_options(parser: Parser, what: str) -> None:
    """`--execute` to act; without it a verb that changes state only shows what it would do
    (as `kafka-consumer-groups --reset-offsets` needs `--execute`). `--dry-run` says so
    explicitly."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--execute", action="store_true", help=f"{what} (without it: only "
                       "show what would change)")
    group.add_argument("--dry-run", action="store_true",
                       help="only show what would change (the default)")


DRY_RUN_NOTE = "dry run: nothing changed; add --execute to apply"


def config_argument(parser: Parser, help_text: str = "the config (mm2.properties or "
                    "Strimzi YAML)") -> None:
    """The config file argument; optional when $FERRY_CONFIG names it (as for the DAGs)."""
    from ferry.config import CONFIG_ENV

    parser.add_argument("file", nargs="?", help=f"{help_text}; default: ${CONFIG_ENV}")


def resolve_config(args: argparse.Namespace) -> None:
    """Fill in `args.file` from $FERRY_CONFIG when the verb takes a config and none was
    given; a usage error when neither is there."""
    from ferry.config import CONFIG_ENV

    if "file" in vars(args) and not args.file:
        args.file = os.environ.get(CONFIG_ENV, "").strip()
        if not args.file:
            raise UsageError(f"no config given: name the file ({args.verb_prog} FILE ...) "
                             f"or set {CONFIG_ENV}")


def config_and_flow(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the config, its enabled flow `--flow`); a usage error names the flows there are.
    Only the flow's two clusters' Airflow connections are looked up."""
    from ferry.config import load_config

    try:
        config = load_config(args.file, flow=args.flow)
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


def at_least_one(refused: Callable[[str], str]) -> Callable[[str], int]:
    """An argparse `type`: a whole number of at least 1, else `refused(value)` as the
    usage error's text."""
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            raise argparse.ArgumentTypeError(refused(value))
        return number

    return parse

"""Shell completion (argcomplete): `ferry completion bash|zsh|fish` prints the script a shell
sources, and `--flow` completes the flows of the config named before it (or $FERRY_CONFIG).

The shell calls `ferry` itself with `_ARGCOMPLETE` set; `offer` answers then and exits, so a
normal run never imports argcomplete.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ferry.cli.verbs import EXIT_OK, Parser, verb

SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    parser = verb(subparsers, "completion", "print the shell completion script for ferry "
                  "(verbs, options, and the flows of a config for --flow)", cmd_completion,
                  ('bash > ~/.local/share/bash-completion/completions/ferry',
                   'zsh > "${fpath[1]}/_ferry"',
                   "fish > ~/.config/fish/completions/ferry.fish",
                   'bash   # or, for this shell only: eval "$(ferry completion bash)"'))
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    script = shellcode(["ferry"], shell=args.shell)
    if args.json:
        import json

        print(json.dumps({"shell": args.shell, "script": script}, indent=2))
    else:
        print(script, end="")
    return EXIT_OK


def flow_choices(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The enabled flows of the config on the command line (or $FERRY_CONFIG) that start
    with `prefix`: by the DAG id's short form `A_to_B`, which needs no quoting, and as
    `A->B` when only that form matches what is typed. Nothing when the config does not
    load."""
    from ferry.config import CONFIG_ENV, load_config
    from ferry.errors import FerryError

    path = getattr(parsed_args, "file", None) or os.environ.get(CONFIG_ENV, "").strip()
    if not path:
        return []
    try:
        flows = load_config(path).enabled_flows
    except (FerryError, OSError):
        return []
    short = [f.dag_id.removeprefix("ferry_") for f in flows]
    return ([s for s in short if s.startswith(prefix)]
            or [f.name for f in flows if f.name.startswith(prefix)])


def offer(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request, if this run is one (it exits then)."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    for action in _flow_actions(parser):
        action.completer = flow_choices  # type: ignore[attr-defined]
    argcomplete.autocomplete(parser)


def _flow_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    found = [a for a in parser._actions if "--flow" in a.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _flow_actions(sub)
    return found

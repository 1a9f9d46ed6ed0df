"""Shell completion as a user gets it: bash sources `ferry completion bash`, and its
completion function (the one `complete -p ferry` names) answers for a half-typed line by
running the real `ferry`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ferry.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MULTI = str(EXAMPLES / "multi-flow.properties")

# Completes the line in $1 as bash would at its end: words split, the function called with
# (command, word being completed, word before), COMPREPLY printed one per line.
HARNESS = r"""
source <(ferry completion bash)
fn=$(complete -p ferry | sed -E 's/.* -F ([^ ]+) .*/\1/')
COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
"$fn" ferry "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


def complete(line: str, **env: str) -> tuple[list[str], str]:
    bash = shutil.which("bash")
    assert bash and shutil.which("ferry"), "bash and the ferry console script are needed"
    done = subprocess.run([bash, "-c", HARNESS, "harness", line], capture_output=True,
                          text=True, timeout=60, check=True,
                          env={k: v for k, v in os.environ.items() if k != "FERRY_CONFIG"}
                          | env)
    return [w.strip() for w in done.stdout.splitlines() if w.strip()], done.stderr


@pytest.mark.parametrize(("line", "env", "offered"), [
    ("ferry pl", {}, ["plan"]),
    ("ferry positions ", {}, ["reset"]),
    (f"ferry plan {MULTI} --fl", {}, ["--flow"]),
    (f"ferry plan {MULTI} --flow ",
     {}, ["edge1_to_central", "edge2_to_central", "central_to_dr", "dr_to_central"]),
    (f"ferry mirror {MULTI} --flow e", {}, ["edge1_to_central", "edge2_to_central"]),
    ("ferry mirror --flow d", {"FERRY_CONFIG": MULTI}, ["dr_to_central"]),
    (f"ferry offsets {MULTI} --flow edge1-", {}, [r"edge1-\>central"]),
    ("ferry completion ", {}, ["bash", "zsh", "fish", "tcsh", "powershell"]),
], ids=["verb", "sub-verb", "option", "flows-of-the-config", "flows-by-prefix",
        "flows-of-FERRY_CONFIG", "arrow-form-escaped", "shells"])
def test_bash_completes_verbs_options_and_the_configs_flows(
        line: str, env: dict[str, str], offered: list[str]) -> None:
    words, _ = complete(line, **env)
    # On an empty word bash is offered the verb's options too; the values must be exact.
    assert [w for w in words if not w.startswith("-")] == [
        o for o in offered if not o.startswith("-")], words
    assert set(offered) <= set(words), words


def test_a_config_that_does_not_load_completes_no_flow_and_prints_no_traceback(
        tmp_path: Path) -> None:
    broken = tmp_path / "broken.properties"
    broken.write_text("clusters = a\na.bootstrap.servers =\n")
    for path in (str(broken), str(tmp_path / "missing.properties")):
        words, stderr = complete(f"ferry plan {path} --flow ")
        assert words == [] and "Traceback" not in stderr, (words, stderr)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_each_shells_script_and_json_carries_it(
        shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "ferry" in script and "_ARGCOMPLETE" in script
    assert main(["completion", shell, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"shell": shell, "script": script}


def test_an_unknown_shell_is_a_usage_error_naming_the_choices(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "csh"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'csh'" in err and "'fish'" in err and len(err.splitlines()) == 1

"""The CLI's conventions: a flow named the way a shell allows, the config from
$FERRY_CONFIG as the DAGs read it, and one line with exit 2 for each mistake."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ferry.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CONFIG = str(EXAMPLES / "multi-flow.properties")


@pytest.mark.parametrize("given", ["edge1->central", "ferry_edge1_to_central",
                                   "edge1_to_central"])
def test_a_flow_is_found_by_its_name_or_its_dag_id(
        given: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", CONFIG, "--flow", given, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flow"]["name"] == "edge1->central"


@pytest.mark.parametrize(("given", "says"), [
    # `--flow edge1->central` unquoted: the shell passed 'edge1-' and wrote a file 'central'
    ("edge1-", "no flow 'edge1-' in {config} (enabled flows: edge1->central, edge2->central, "
               "central->dr, dr->central); unquoted, a shell reads the '>' of edge1->B as a "
               "redirect (and writes a file B): quote it, --flow 'edge1->B', or give the DAG "
               "id's form, edge1_to_B"),
    ("edge3->central", "no flow 'edge3->central' in {config} (enabled flows: "),
    ("ferry_edge3_to_central", "no flow 'ferry_edge3_to_central' in {config}"),
])
def test_an_unknown_flow_is_one_line_naming_the_flows_and_the_fix(
        given: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", CONFIG, "--flow", given])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and says.format(config=CONFIG) in err, err


def test_the_config_comes_from_ferry_config_when_no_file_is_given(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FERRY_CONFIG", CONFIG)
    assert main(["validate", "--flow", "dr_to_central", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flow"]["name"] == "dr->central"


@pytest.mark.parametrize("argv", [["validate"], ["plan", "--flow", "a->b"],
                                  ["positions", "reset", "--flow", "a->b", "--topic", "t",
                                   "--to", "earliest"]])
def test_no_file_and_no_ferry_config_is_a_usage_error(
        argv: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("FERRY_CONFIG", raising=False)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert "no config given: name the file (ferry " in err and "or set FERRY_CONFIG" in err


def test_an_unknown_log_format_is_a_usage_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FERRY_LOG_FORMAT", "xml")
    code = main(["validate", CONFIG])
    err = capsys.readouterr().err
    assert code == 2 and "FERRY_LOG_FORMAT='xml' is not a log format" in err
    assert "Traceback" not in err


def verb_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every verb's parser, by its command line (`ferry positions reset`, ...)."""
    from ferry.cli.main import build_parser

    found: dict[str, argparse.ArgumentParser] = {}
    pending = [build_parser()]
    while pending:
        parser = pending.pop()
        for action in parser._actions:  # argparse keeps subcommands only here
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
        if parser.get_default("func") is not None:
            found[parser.prog] = parser
    return found


def test_every_verbs_help_says_what_it_does_and_its_exit_codes() -> None:
    verbs = verb_parsers()
    assert {"ferry mirror", "ferry positions reset", "ferry backfill", "ferry validate"} <= set(
        verbs)
    for prog, parser in verbs.items():
        text = parser.format_help()
        assert parser.description and parser.description[0].isupper(), prog
        assert "exit codes: 0 done, 1 the operation failed" in text, prog


@pytest.mark.parametrize("prog", ["ferry positions reset", "ferry backfill"])
def test_verbs_that_change_state_act_only_with_execute(prog: str) -> None:
    parser = verb_parsers()[prog]
    shown = parser.format_help()
    assert "--execute" in shown and "examples:" in shown
    required = {"ferry positions reset": ["--topic", "t", "--to", "earliest"],
                "ferry backfill": []}[prog]
    args = parser.parse_args(["mm2.properties", "--flow", "a->b", *required])
    assert args.execute is False
    assert parser.parse_args(["mm2.properties", "--flow", "a->b", *required,
                              "--execute"]).execute is True


def test_rules_link_each_alert_to_the_runbook_of_the_airflow_they_are_printed_for(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/dr/")
    assert main(["rules", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runbook_url"] == "https://airflow.example.com/dr/ferry/runbook"
    assert ('runbook_url: "https://airflow.example.com/dr/ferry/runbook#ferryflowdown"'
            in printed["text"])
    assert main(["rules", "--kubernetes", "--runbook-url", "https://wiki.example.com/ferry"]) == 0
    assert "kind: PrometheusRule" in capsys.readouterr().out


def test_a_runbook_url_that_is_not_an_address_is_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--runbook-url", "runbook#x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--runbook-url runbook#x: give the runbook's absolute" in err

"""`ferry validate`: resolved flows as text and JSON, problems as one line each, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferry.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SECRET_VALUES = ("example-cloud-api-secret", "example-scram-password", "eh-test-key-9876")


@pytest.fixture(autouse=True)
def example_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_SOURCE_BOOTSTRAP", "127.0.0.1:19092")
    monkeypatch.setenv("FERRY_TARGET_BOOTSTRAP", "127.0.0.1:29092")
    monkeypatch.setenv("EVENTHUBS_CONNECTION_STRING",
                       "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;"
                       "SharedAccessKey=eh-test-key-9876")


def test_validate_prints_flows_with_secrets_masked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "sasl-ssl-plain.properties")]) == 0
    out = capsys.readouterr().out
    assert "flow onprem->cloud  (Airflow DAG ferry_onprem_to_cloud)" in out
    assert "include 'orders.*, payments, customers'" in out
    assert "'orders' -> 'onprem.orders'" in out
    assert "sync.group.offsets every 60s" in out
    assert "sasl.password=******" in out
    assert "schedule=*/5 * * * *" in out
    assert "example-cloud-api-secret" not in out


def test_validate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "multi-flow.properties"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True
    names = [f["name"] for f in data["flows"]]
    assert names == ["edge1->central", "edge2->central", "central->dr", "dr->central"]
    flow = data["flows"][0]
    assert flow["topics"]["include"] == "sensors.*"
    assert flow["tasks_max"] == 4
    assert flow["features"]["sync.topic.acls"]["enabled"] is True
    assert flow["clients"]["source_consumer"]["security.protocol"] == "SSL"
    assert flow["ferry"]["delivery"] == "exactly_once"
    assert "edge1->edge2" in data["heartbeat_only_pairs"]


def test_validate_one_flow(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "multi-flow.properties"), "--flow",
                 "central->dr", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flow"]["name"] == "central->dr"


def test_unknown_flow_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "multi-flow.properties"), "--flow", "x->y"]) == 2
    assert "no flow 'x->y'" in capsys.readouterr().err


def test_problems_are_one_line_each_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nA->C.enabled = true\n"
                   "A.security.protocol = SASL_SSL\nA.sasl.mechanism = PLAIN\n"
                   "A.sasl.jaas.config = broken pw-should-not-show\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3, err
    assert all(line.startswith(f"ferry: {bad}: ") for line in err)
    assert "pw-should-not-show" not in "\n".join(err)


def test_problems_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("A.bootstrap.servers = a:1\n")
    assert main(["validate", str(bad), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    assert data["problems"][0]["key"] == "clusters"
    assert data["problems"][0]["fix"]


def test_usage_error_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--flow"]) == 2
    assert "argument --flow: expected one argument" in capsys.readouterr().err


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.*")
                                           if p.suffix in (".properties", ".yaml")))
def test_every_example_config_validates_without_leaking_secrets(
    example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(EXAMPLES / example)]) == 0
    assert main(["validate", str(EXAMPLES / example), "--json"]) == 0
    out = capsys.readouterr().out
    for secret in SECRET_VALUES:
        assert secret not in out


def test_validate_one_flow_without_json_prints_text_as_for_the_whole_config(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(EXAMPLES / "multi-flow.properties"), "--flow",
                 "central->dr"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flow central->dr  (Airflow DAG ferry_central_to_dr)\n")
    assert "  policy:   " in out and not out.lstrip().startswith("{")


class ClosedPipe:
    """stdout whose reader (`| head`) has gone: every write fails as a closed pipe does."""

    def write(self, _text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        return self.target

    def __init__(self, target: int) -> None:
        self.target = target


def test_output_into_a_closed_pipe_ends_quietly_with_sigpipes_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # the descriptor `main` points at /dev/null once the pipe is gone (a file here)
    with open(tmp_path / "stdout", "w") as spare:
        monkeypatch.setattr("sys.stdout", ClosedPipe(spare.fileno()))
        code = main(["validate", str(EXAMPLES / "multi-flow.properties")])

    assert code == 141  # 128 + SIGPIPE, as `yes | head` ends
    assert capsys.readouterr().err == ""  # no traceback, no error line

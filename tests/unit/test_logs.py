"""How Ferry's lines look: text or JSON lines on stderr in its own processes, and through
the host's handlers, at their own level, inside an Airflow task. (That a real scheduler's
task log holds them at level info is shown in tests/scheduler.)"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from ferry import logs
from ferry.errors import UsageError
from ferry.secrets import Secret

SECRET = "hunter2-s3cr3t"


@pytest.fixture(autouse=True)
def root_handlers() -> Iterator[None]:
    """Each test sets up logging afresh; the runner's handlers come back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    ferry_level = logging.getLogger("ferry").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("ferry").setLevel(ferry_level)


def emit(capsys: pytest.CaptureFixture[str]) -> str:
    Secret(SECRET)
    log = logs.context_logger("ferry.lane", flow="A->B", lane=1, run_id="r-1")
    log.info("copied %d records with password %s", 12, SECRET,
             extra={"topic": "orders", "partition": 3})
    return capsys.readouterr().err


def test_text_lines_carry_the_context_and_mask_secrets(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(logs.FORMAT_ENV, raising=False)
    logs.setup()
    line = emit(capsys).strip()
    assert " INFO ferry.lane: copied 12 records with password ******" in line
    assert line.endswith("[flow=A->B lane=1 topic=orders partition=3 run_id=r-1]")
    assert SECRET not in line


def test_json_lines_carry_the_context_as_fields_and_mask_secrets(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(logs.FORMAT_ENV, "json")
    logs.setup()
    out = emit(capsys)
    entry = json.loads(out)
    assert {k: v for k, v in entry.items() if k != "time"} == {
        "level": "info", "logger": "ferry.lane",
        "message": "copied 12 records with password ******",
        "flow": "A->B", "lane": 1, "topic": "orders", "partition": 3, "run_id": "r-1"}
    assert entry["time"].endswith("Z") and SECRET not in out


def test_a_json_line_holds_the_traceback_masked(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(logs.FORMAT_ENV, "json")
    logs.setup()
    Secret(SECRET)
    try:
        raise RuntimeError(f"login failed for {SECRET}")
    except RuntimeError:
        logging.getLogger("ferry.x").exception("lane failed")
    entry = json.loads(capsys.readouterr().err)
    assert entry["level"] == "error" and "RuntimeError: login failed for ******" in entry[
        "exception"]


@pytest.mark.parametrize("value", ["xml", "JSONL", "logfmt"])
def test_an_unknown_log_format_is_a_usage_error_naming_the_choices(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(logs.FORMAT_ENV, value)
    with pytest.raises(UsageError, match=f"FERRY_LOG_FORMAT='{value}' is not a log format: "
                                         "set it to text or json"):
        logs.setup()


def test_inside_a_host_ferry_keeps_its_handlers_and_their_levels() -> None:
    # given: a host (an Airflow task) with its own handler, at INFO
    root = logging.getLogger()
    host = io.StringIO()
    handler = logging.StreamHandler(host)
    handler.setFormatter(logging.Formatter("%(levelname)s|%(name)s|%(message)s"))
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)

    # when: Ferry joins it, twice (every task loads its config)
    logs.join_host()
    logs.join_host()
    Secret(SECRET)
    logging.getLogger("ferry.mirror").info("planned 5 ranges for %s", SECRET,
                                           extra={"flow": "A->B"})
    logging.getLogger("ferry.lane").warning("slow", extra={"flow": "A->B", "partition": 2})

    # then: its lines went through the host's handler at their own level, with the context
    # once and the secret masked
    assert root.handlers == [handler]
    assert host.getvalue().splitlines() == [
        "INFO|ferry.mirror|planned 5 ranges for ****** [flow=A->B]",
        "WARNING|ferry.lane|slow [flow=A->B partition=2]"]


def test_a_host_without_handlers_gets_ferrys_own(capsys: pytest.CaptureFixture[str]) -> None:
    logging.getLogger().handlers[:] = []
    logs.join_host()
    logging.getLogger("ferry.x").info("hello")
    assert " INFO ferry.x: hello" in capsys.readouterr().err

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


@pytest.mark.parametrize(("raw", "line"), [
    ("FAIL [rdkafka#producer-1] [thrd:b:9/bootstrap]: b:9/bootstrap: Connect to ipv4#b:9 "
     "failed: Connection refused (after 0ms in state CONNECT)",
     "FAIL b:9/bootstrap: Connect to ipv4#b:9 failed: Connection refused"),
    ("FAIL [rdkafka#consumer-7] [thrd:b:9/bootstrap]: b:9/bootstrap: Connect to ipv4#b:9 "
     "failed: Connection refused (after 1ms in state CONNECT, 498 identical error(s) "
     "suppressed)",
     "FAIL b:9/bootstrap: Connect to ipv4#b:9 failed: Connection refused"),
    ("ERROR [rdkafka#producer-2] [thrd:app]: 1/1 brokers are down",
     "ERROR 1/1 brokers are down"),
    ("SASL [rdkafka#producer-1] [thrd:b:9/1]: b:9/1: SASL authentication error: "
     "Authentication failed (after 5ms in state AUTH_REQ)",
     "SASL b:9/1: SASL authentication error: Authentication failed"),
], ids=["refused", "librdkafka-counted-repeats", "all-down", "auth"])
def test_a_client_line_drops_what_differs_between_repeats_of_one_fault(
    raw: str, line: str
) -> None:
    assert logs.client_line(raw) == line


def test_a_clients_lines_name_the_cluster_and_go_no_higher_than_warning() -> None:
    logger = logging.getLogger("ferry.test.client")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        log = logs.ClientLog("target", logger)
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1",
                "[thrd:b:9/bootstrap]: b:9/bootstrap: Connect to ipv4#b:9 failed: refused")
        log.log(logging.INFO, "%s [%s] %s", "INIT", "rdkafka#producer-1", "[thrd:app]: ready")
    finally:
        logger.removeHandler(handler)

    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, "cluster target: FAIL b:9/bootstrap: Connect to ipv4#b:9 failed: "
                          "refused"),
        (logging.INFO, "cluster target: INIT ready")]


def test_a_repeated_line_is_let_through_once_a_window_then_with_how_often_it_came() -> None:
    now = [0.0]
    repeats = logs.Repeats(window_s=60, clock=lambda: now[0])

    def through(message: str, at: float) -> str | None:
        now[0] = at
        record = logging.LogRecord("ferry.kafka.librdkafka", logging.WARNING, __file__, 1,
                                   message, None, None)
        return record.getMessage() if repeats.filter(record) else None

    assert through("cluster A: refused", 0) == "cluster A: refused"
    assert [through("cluster A: refused", t) for t in (1, 2, 59)] == [None, None, None]
    assert through("cluster B: refused", 3) == "cluster B: refused"  # another line: its own
    assert through("cluster A: refused", 61) == ("cluster A: refused (and 3 more like it in "
                                                 "the last 60s)")
    assert through("cluster A: refused", 62) is None


def test_the_client_lines_are_counted_once_however_often_logging_is_set_up() -> None:
    clients = logging.getLogger(logs.CLIENT_LOGGER)
    logs.setup()
    logs.setup()
    assert len([f for f in clients.filters if isinstance(f, logs.Repeats)]) == 1

"""Logging set-up: context (flow, topic, partition) on every line, secrets always masked.

Library code logs through `logging.getLogger(__name__)` and passes context as
`extra={"flow": ..., "topic": ..., "partition": ...}` (or uses `context_logger`); the
formatter shows whichever of them a record carries.

- A Ferry process of its own (the CLI, the copy job, a lane) logs to stderr (`setup`): text
  lines, or JSON lines with the context as fields when `FERRY_LOG_FORMAT=json`, for log
  shippers.
- Inside a host that set up logging already, an Airflow task, Ferry keeps the host's
  handlers (`join_host`): its lines then reach the task log at their own level (a handler
  of Ferry's would write to stderr, which Airflow's supervisor forwards as errors), with the
  context appended to the message and secrets masked.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

from ferry import crash
from ferry.errors import UsageError
from ferry.secrets import REDACTOR, RedactingFilter

_CONTEXT = ("flow", "lane", "topic", "partition", "run_id")
CLIENT_LOGGER = "ferry.kafka.librdkafka"
"""The logger of the Kafka clients' own (librdkafka's) lines (`ClientLog`)."""
FORMAT_ENV = "FERRY_LOG_FORMAT"
FORMATS = ("text", "json")


def context_of(record: logging.LogRecord) -> dict[str, Any]:
    """The context fields `record` carries, in a fixed order."""
    return {k: getattr(record, k) for k in _CONTEXT if hasattr(record, k)}


def _context_text(record: logging.LogRecord) -> str:
    return " ".join(f"{k}={v}" for k, v in context_of(record).items())


class ContextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        ctx = _context_text(record)
        return f"{base} [{ctx}]" if ctx else base


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the context
    fields the record carries, and the exception's traceback when there is one. The whole
    line is masked, the traceback included."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage(), **context_of(record)}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return REDACTOR.redact(json.dumps(entry, default=str))


class ContextInMessage(logging.Filter):
    """Appends the record's context to its message, for hosts whose formatters do not show
    extra fields (Airflow's drops them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _context_text(record)
        if ctx and not getattr(record, "ferry_context_added", False):
            record.msg, record.args = f"{record.getMessage()} [{ctx}]", None
            record.ferry_context_added = True
        return True


class ContextLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger that adds fixed context (e.g. the flow) to every record."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


def context_logger(name: str, **context: object) -> ContextLogger:
    return ContextLogger(logging.getLogger(name), context)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is now (test runners swap and close it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


_CLIENT_NOISE = (re.compile(r"\[rdkafka#[^\]]*\] "), re.compile(r"\[thrd:[^\]]*\]: "),
                 re.compile(r" \((after \d+ms in state \w+(, )?)?(\d+ identical error\(s\) "
                            r"suppressed)?\)$"))
"""What makes two lines of one client fault differ: the client's and thread's names, the
time in state, librdkafka's own count of what it suppressed."""


def client_line(text: str) -> str:
    """A librdkafka line without what differs between repeats of one fault (`FAIL
    [rdkafka#producer-1] [thrd:b:9/bootstrap]: b:9/bootstrap: Connect to ipv4#b:9 failed:
    Connection refused (after 0ms in state CONNECT)` -> `FAIL b:9/bootstrap: Connect to
    ipv4#b:9 failed: Connection refused`)."""
    for noise in _CLIENT_NOISE:
        text = noise.sub("", text)
    return text


class ClientLog:
    """Where one cluster's Kafka clients log (confluent-kafka's `logger` setting): each
    librdkafka line goes to the `ferry.kafka.librdkafka` logger naming the cluster, without
    the client's own noise (`client_line`), and at most at WARNING: the client retries what
    it reports there, and whether that ends in an error is Ferry's to say, once, naming the
    cluster and what to check. Repeats are counted, not logged (`Repeats`)."""

    def __init__(self, cluster: str, logger: logging.Logger | None = None) -> None:
        self.cluster = cluster
        self._logger = logger or logging.getLogger(CLIENT_LOGGER)

    def log(self, level: int, msg: str, *args: object) -> None:
        """confluent-kafka's call for each line (`logger.log(level, fmt, *args)`)."""
        text = msg % args if args else msg
        self._logger.log(min(level, logging.WARNING), "cluster %s: %s", self.cluster,
                         client_line(text))


class Repeats(logging.Filter):
    """Lets a line through once per `window_s` seconds: a repeat within the window is
    counted, not logged, and the first line after it says how many there were. For the
    clients' lines (`ClientLog`), which repeat a fault as often as the client retries it
    (hundreds of times a minute for a cluster that refuses connections). Keeps the last
    `keep` distinct lines. Thread-safe (librdkafka logs from its own threads)."""

    def __init__(self, window_s: float = 60.0, keep: int = 1000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s, self.keep, self._clock = window_s, keep, clock
        self._seen: OrderedDict[str, list[float | int]] = OrderedDict()
        """line -> [when it was last let through, repeats since]"""
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        line, now = record.getMessage(), self._clock()
        with self._lock:
            seen = self._seen.get(line)
            if seen is not None and now - seen[0] < self.window_s:
                seen[1] += 1
                return False
            repeats = int(seen[1]) if seen is not None else 0
            self._seen[line] = [now, 0]
            self._seen.move_to_end(line)
            while len(self._seen) > self.keep:
                self._seen.popitem(last=False)
        if repeats:
            record.msg, record.args = (f"{line} (and {repeats} more like it in the last "
                                       f"{self.window_s:.0f}s)"), None
        return True


def _count_client_repeats() -> None:
    """Let each distinct client line through once a minute (`Repeats`), once per process."""
    clients = logging.getLogger(CLIENT_LOGGER)
    if not any(isinstance(f, Repeats) for f in clients.filters):
        clients.addFilter(Repeats())


def log_format() -> str:
    """`$FERRY_LOG_FORMAT`: text (the default) or json; anything else is a usage error."""
    chosen = os.environ.get(FORMAT_ENV, "").strip().lower() or "text"
    if chosen not in FORMATS:
        raise UsageError(f"{FORMAT_ENV}={os.environ[FORMAT_ENV]!r} is not a log format: set "
                         f"it to {' or '.join(FORMATS)}, or unset it for text")
    return chosen


def setup(verbose: bool = False) -> None:
    """Log to stderr, in `log_format()`; INFO by default, DEBUG with `verbose`. Also turns
    on the native-crash stack dump (`ferry.crash`): every Ferry process sets up logging
    first. Raises UsageError for an unknown `$FERRY_LOG_FORMAT`."""
    crash.enable()
    handler = _StderrHandler()
    handler.setFormatter(
        JsonFormatter() if log_format() == "json"
        else ContextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    _count_client_repeats()


def join_host() -> None:
    """Log through the handlers the host process set up (an Airflow task's), adding the
    context and the masking to each, and let Ferry's INFO lines through. Without any
    handler, as `setup`."""
    crash.enable()
    root = logging.getLogger()
    if not root.handlers:
        setup()
        return
    for handler in root.handlers:
        if not any(isinstance(f, ContextInMessage) for f in handler.filters):
            handler.addFilter(ContextInMessage())
            handler.addFilter(RedactingFilter())
    ferry = logging.getLogger("ferry")
    if ferry.level == logging.NOTSET:  # a level the host chose for Ferry stays
        ferry.setLevel(logging.INFO)
    _count_client_repeats()

"""Logging set-up: context (flow, topic, partition) on every line, secrets always masked.

Library code logs through `logging.getLogger(__name__)` and passes context as
`extra={"flow": ..., "topic": ..., "partition": ...}` (or uses `context_logger`); the
formatter shows whichever of them a record carries.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

from ferry import crash
from ferry.secrets import RedactingFilter

_CONTEXT = ("flow", "lane", "topic", "partition")


class ContextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in _CONTEXT if hasattr(record, k))
        return f"{base} [{ctx}]" if ctx else base


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


def setup(verbose: bool = False) -> None:
    """Log to stderr; INFO by default, DEBUG with `verbose`. Also turns on the native-crash
    stack dump (`ferry.crash`): every Ferry process sets up logging first."""
    crash.enable()
    handler = _StderrHandler()
    handler.setFormatter(ContextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("py4j").setLevel(logging.WARNING)

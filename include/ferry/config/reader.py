"""Typed reads of MM2 properties: booleans, whole numbers, choices, intervals.

A value that does not parse is a problem naming the key as written, and the default stands in
for it, so that validation goes on and reports every problem of the file at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.config.findings import Findings
from ferry.config.model import Interval
from ferry.config.values import Props


@dataclass(frozen=True)
class Reader:
    """One set of properties (the top level, or a flow's connector settings) and where to
    report what is wrong with them."""

    props: Props
    findings: Findings

    def boolean(self, key: str, default: bool) -> bool:
        value = self.props.get(key)
        if value is None:
            return default
        text = value.text.strip().lower()
        if text not in ("true", "false"):
            self.findings.problem(value.origin, "must be true or false",
                                  f"set {value.origin}={'true' if default else 'false'}",
                                  value.shown())
            return default
        return text == "true"

    def integer(self, key: str, default: int, minimum: int | None = None) -> int:
        value = self.props.get(key)
        if value is None:
            return default
        try:
            number = int(value.text.strip())
        except ValueError:
            self.findings.problem(value.origin, "must be a whole number",
                                  f"e.g. {value.origin}={default}", value.shown())
            return default
        if minimum is not None and number < minimum:
            self.findings.problem(value.origin, f"must be at least {minimum}",
                                  f"e.g. {value.origin}={default}", value.shown())
            return default
        return number

    def choice(self, key: str, options: tuple[str, ...]) -> str:
        """One of `options` (case-insensitive); the first is the default."""
        value = self.props.get(key)
        if value is None:
            return options[0]
        text = value.text.strip().lower()
        if text not in options:
            self.findings.problem(value.origin, f"must be one of {', '.join(options)}",
                                  f"set {value.origin}={options[0]}", value.shown())
            return options[0]
        return text

    def replication_factor(self, key: str = "replication.factor", default: int = 2) -> int:
        """At least 1, or -1 for the broker's default (MM2's rule)."""
        factor = self.integer(key, default)
        if factor == 0 or factor < -1:
            value = self.props[key]
            self.findings.problem(value.origin, "must be at least 1, or -1 for the broker's "
                                  "default", f"set {value.origin}=3", value.text)
            return default
        return factor

    def interval(self, name: str, default_on: bool, default_seconds: int) -> Interval:
        """A periodic MM2 feature: `<name>.enabled` and `<name>.interval.seconds`."""
        enabled = self.boolean(f"{name}.enabled", default_on)
        seconds = self.integer(f"{name}.interval.seconds", default_seconds)
        return Interval(enabled, seconds, explicit=f"{name}.interval.seconds" in self.props)

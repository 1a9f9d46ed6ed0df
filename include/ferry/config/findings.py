"""What validating one config found: problems (the config is refused) and warnings (it loads).

One `Findings` is made per config and handed to every check, which appends in the order it
runs: that order is the order the user reads them in, so checks keep their sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry.errors import ConfigError, Problem


@dataclass
class Findings:
    problems: list[Problem] = field(default_factory=list)
    """In the order found, repeats included; add to it with `problem`."""
    warnings: list[str] = field(default_factory=list)

    def problem(self, key: str, message: str, fix: str = "", value: str | None = None) -> None:
        """`key` as the user wrote it; `value` already masked when secret."""
        self.problems.append(Problem(key, message, fix, value))

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def raise_problems(self, source: str) -> None:
        """Raise ConfigError listing each distinct problem once, in the order found."""
        unique = list(dict.fromkeys(self.problems))
        if unique:
            raise ConfigError(unique, source=source)

    def distinct_warnings(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.warnings))

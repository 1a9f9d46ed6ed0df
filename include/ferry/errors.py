"""Ferry's few error types.

Every error a user can cause carries enough structure to print one line that names what
is wrong and how to fix it. `TerminalError` means retrying cannot help (bad config, a
refused record); `TransientError` means it may (a broker that is down). Task edges turn
terminal errors into Airflow's fail-without-retry; the CLI turns them into exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass


class FerryError(Exception):
    """Base of every error Ferry raises on purpose."""


class TerminalError(FerryError):
    """Retrying the same work cannot succeed; a person has to change something."""


class TransientError(FerryError):
    """The same work may succeed later (a broker restarting, a timeout)."""


class WriterTaken(TransientError):
    """A newer writer took this writer's slot (another run of the flow, a backfill into its
    topic, an adoption): this one stopped, and the newer one resumes from what was
    committed."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of `exc`'s message, at most `limit` characters (its type's name when
    it has none): what a log line quotes of a client's multi-line error."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the configuration.

    `key` is the property as the user wrote it (or the YAML path), `value` is already
    masked when secret, `fix` says what to do.
    """

    key: str
    message: str
    fix: str = ""
    value: str | None = None

    def line(self) -> str:
        shown = f" = {self.value!r}" if self.value is not None else ""
        fix = f"; {self.fix}" if self.fix else ""
        return f"{self.key}{shown}: {self.message}{fix}"


class ConfigError(TerminalError):
    """The configuration has one or more problems; all of them are listed."""

    def __init__(self, problems: list[Problem], source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__("\n".join(where + p.line() for p in self.problems))


class UsageError(TerminalError):
    """The command line is wrong (exit code 2, like a config error)."""

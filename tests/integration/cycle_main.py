"""Run one in-process mirror cycle for a config and flow (a killable child process).

`python -m tests.integration.cycle_main CONFIG FLOW [--hold-first-commit | --hold-in-commit
MARKER]`: with `--hold-first-commit`, the first writer stops for good at its first commit,
its records sent and its positions not committed, so a kill that follows always lands
mid-batch, however fast the copy ran. With `--hold-in-commit`, it stops one step later:
its positions sent to its transaction too (pending in the positions group), the transaction
not committed; MARKER is written once it is there."""

from __future__ import annotations

import faulthandler
import sys
import threading
from pathlib import Path
from typing import Any

from ferry.config import load_config
from ferry.core.lanes import by_writer
from ferry.kafka.lane import Lane, Part
from ferry.steps.plan import prepare


class HeldAtCommit(Lane):
    """A writer that never gets past its first commit (it waits to be killed)."""

    def commit(self, producer: Any, metadata: Any, parts: list[Part]) -> None:
        producer.flush(30)  # every record sent is written: the batch is whole, uncommitted
        threading.Event().wait()


class _NeverCommits:
    """A producer whose transaction never commits: the call writes `marker` and waits to be
    killed. Everything else is the real producer's."""

    def __init__(self, producer: Any, marker: Path) -> None:
        self._producer, self._marker = producer, marker

    def commit_transaction(self, *_: Any) -> None:
        self._marker.write_text("positions sent, transaction open\n")
        threading.Event().wait()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


def held_in_commit(marker: Path) -> type[Lane]:
    class HeldInCommit(Lane):
        """A writer that stops for good inside its first commit."""

        def commit(self, producer: Any, metadata: Any, parts: list[Part]) -> None:
            super().commit(_NeverCommits(producer, marker), metadata, parts)

    return HeldInCommit


def main(config: str, flow_name: str, options: list[str]) -> None:
    faulthandler.enable()
    flow = load_config(config).flow(flow_name)
    prepared = prepare(flow)
    writer: type[Lane] = Lane
    if "--hold-first-commit" in options:
        writer = HeldAtCommit
    elif "--hold-in-commit" in options:
        writer = held_in_commit(Path(options[options.index("--hold-in-commit") + 1]))
    for ranges in by_writer(prepared.plan.ranges, flow.ferry.writers).values():
        writer(flow, ranges, prepared.run_id).run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])

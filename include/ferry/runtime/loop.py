"""The runtime of a process's continuous loops: what lives from one cycle to the next.

`ferry mirror --continuous` (with or without `--flow`) and the `@continuous` DAG make one
`Loop` as they start (`ferry.steps.cycle.run_continuously`, `run_all`), pass it to each
cycle, and close it as they end: each flow's Delta recorder and kept lanes (the local
runner's, `ferry.runtime.local`), and whatever the Spark runner keeps between jobs (its
Spark Connect sessions, `sessions`). Nothing of it is module-level: two loops in one process
(or a test) never share a recorder or a client by accident.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from ferry.errors import FerryError
from ferry.kafka.stuck import LeftBehind

if TYPE_CHECKING:
    from ferry.config import Flow
    from ferry.runtime.kept_lanes import KeptLanes
    from ferry.runtime.local import LocalRunner
    from ferry.runtime.recorder import Recorder

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 300.0
"""How long a loop that stops waits for its recorder's last batch: a batch that hangs (a
server that stopped answering) must not keep the process from ending."""


class Closes(Protocol):
    """What the Spark runner keeps between a loop's jobs (`ferry.spark.connect`
    `ConnectSessions`), closed with the loop."""

    def close(self) -> None: ...


S = TypeVar("S", bound=Closes)


class Loop(Generic[S]):
    """One process's continuous loops' runtime (see the module). Not thread-safe: a
    process's loops run their cycles one after another (`run_all`) or there is one loop."""

    def __init__(self, sessions: S | None = None) -> None:
        """`sessions`: the Spark runner's kept sessions, closed with the loop (None: none
        are kept)."""
        self.sessions = sessions
        self.left_behind = LeftBehind()
        """The threads of abandoned cycles and stuck producer calls this loop's process
        still carries, and their bound (`ferry.kafka.stuck`): past it the loop exits."""
        self._recorders: dict[str, Recorder] = {}
        """Each flow's Delta recorder, by flow name."""
        self._lanes: dict[str, KeptLanes] = {}
        """Each flow's kept lanes, by flow name."""
        self._ends_at: float | None = None
        """When the loops end (monotonic), leaving their last Delta batch to the flow's
        next run (`end_at`); None: a loop writes it as it stops."""

    def end_at(self, when: float | None) -> None:
        """The loops end at `when` (`time.monotonic`) and close with
        `close(hand_over=True)`: their recorders, those made later too, start no batch that
        would outlast them (`Recorder.end_at`)."""
        self._ends_at = when
        for recorder in self._recorders.values():
            recorder.end_at(when)

    def runner(self, flow: Flow) -> LocalRunner:
        """The local runner of `flow`'s cycles in this loop: its kept lanes (exactly_once:
        an at_least_once writer claims its slot anew each cycle, `ferry.kafka.claim`, so its
        lanes start afresh) and its recorder (unless `ferry.state.record.interval.seconds` is
        0: each job then appends its rows before it returns)."""
        from ferry.runtime.kept_lanes import KeptLanes
        from ferry.runtime.local import LocalRunner

        lanes = None
        if flow.ferry.delivery == "exactly_once":
            lanes = self._lanes.get(flow.name)
            if lanes is None:
                lanes = self._lanes[flow.name] = KeptLanes(flow,
                                                           left_behind=self.left_behind)
        return LocalRunner(flow, lanes, self._recorder(flow))

    def prepare(self, flow: Flow) -> None:
        """Ready `flow`'s local loop before its first cycle: its recorder is made now, so
        the first plan, as every later one, reads no offset-map lag (its first batch waits
        for `started`)."""
        self._recorder(flow)

    def started(self, flow: Flow) -> None:
        """The loop's first cycle is done: its recorder starts a first batch now, which
        records what earlier runs left (handed over at their end, or not written), even
        should no later cycle copy. Not before: that batch's first Delta reads (pyarrow's
        imports, the table's log) took the CPU and the GIL from the first cycle, which copies
        what piled up while no run of the flow was copying, at each turn of an
        `@continuous` DAG's runs."""
        recorder = self._recorders.get(flow.name)
        if recorder is not None:
            recorder.catch_up()

    def records_behind(self, flow_name: str) -> bool:
        """Whether a recorder of this loop appends `flow_name`'s Delta behind its copies:
        it records what the target committed, so a cycle needs no job of its own for an
        offset map Delta does not hold yet."""
        return flow_name in self._recorders

    def abandoned(self, flow_name: str, run_id: str) -> None:
        """The loop abandoned the cycle of `run_id` as hung: the flow's recorder, if any, no
        longer waits for its rows (`Recorder.abandon`); its lanes leave the hung writers
        their clients by themselves (`KeptLanes.copy`)."""
        recorder = self._recorders.get(flow_name)
        if recorder is not None:
            recorder.abandon(run_id)

    def _recorder(self, flow: Flow) -> Recorder | None:
        from ferry.runtime.recorder import Recorder

        if flow.ferry.state_record_interval_seconds <= 0:
            return None
        if flow.name not in self._recorders:
            self._recorders[flow.name] = Recorder(flow)
            self._recorders[flow.name].end_at(self._ends_at)
        return self._recorders[flow.name]

    def close(self, hand_over: bool = False) -> None:
        """Close the kept lanes (their clients hold no open transaction between cycles),
        then write the recorders' last batches, then close what the Spark runner kept. A
        last batch that fails is logged, not raised: what it held is rebuilt from the
        target's offset-map topic by the flow's next run. `hand_over` (a run whose next run
        follows at once): the copied ranges' rows still pending are left to the next run's
        first batch (`Recorder.close`), so the next run does not wait for a last batch."""
        while self._lanes:
            name, lanes = self._lanes.popitem()
            try:
                lanes.close()
            except Exception as exc:  # best effort: the process is ending
                log.warning("closing the kept writers: %s", exc, extra={"flow": name})
        while self._recorders:
            name, recorder = self._recorders.popitem()
            try:
                recorder.close(CLOSE_TIMEOUT_S, hand_over=hand_over)
            except FerryError as exc:
                log.error("%s", exc, extra={"flow": name})
        # only now: a recorder told of no end before its close would start the batch that a
        # hand-over leaves to the next run
        self._ends_at = None
        if self.sessions is not None:
            self.sessions.close()

"""A continuous loop's lanes, kept in its own process from cycle to cycle (adapter).

A continuous loop on the local copy runner (`ferry.copy.runner`, `ferry.runtime.local`)
runs its cycles' lanes here: one thread per lane, each running its writer slots one after
another (`ferry.runtime.slots.write_slots`, as a Spark task does), every slot's writer
starting from the clients the slot's writer of the cycle before kept (its client source,
`ferry.kafka.kept.KeptClients`): its producer, and the source consumer and position reader
of its lane, which the lane's slots share. A cycle then costs no Spark job, no Python
worker and no new producer: only its reads, sends and commits. The runs and the offset map
are appended to Delta behind the copies (`ferry.runtime.recorder`).

The writers are the same as Spark's: the same transactional ids, the same positions read
before each cycle's first record, the same takeover rule between runs of the flow.
Threads share the process's interpreter, so lanes run side by side only while librdkafka
works (it releases the interpreter); one lane's rate is what one Python core copies.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ferry.core.takeover import Named, cycle_named, names_itself, writing
from ferry.kafka.kept import KeptClients, LaneReaders

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from ferry.config import Flow
    from ferry.core.planner import Range
    from ferry.core.tables import RunRow
    from ferry.kafka.lane import Lane
    from ferry.kafka.runs import NewestRun
    from ferry.kafka.stuck import LeftBehind

log = logging.getLogger(__name__)


class KeptLanes:
    """The lanes of one flow's continuous loop; `copy` once per cycle, `close` at the end.
    Not for two cycles at once: a hung cycle the loop abandoned is fenced by the next one's
    writers, which start from new clients (`abandon`)."""

    def __init__(self, flow: Flow, writer: Callable[..., Lane] | None = None,
                 left_behind: LeftBehind | None = None) -> None:
        """`writer`: makes a slot's writer, as `Lane` takes its arguments (default `Lane`).
        `left_behind`: where the writers count the threads of producer calls they gave up
        on as stuck (the loop's; `ferry.kafka.stuck`)."""
        self.flow, self._make, self.left_behind = flow, writer, left_behind
        self._slots: dict[tuple[str, int], KeptClients] = {}
        self._readers: dict[tuple[str, int], LaneReaders] = {}
        """Each lane's consumer and reader, by role and lane: a lane runs its slots one
        after another, so they are never used by two writers at once."""
        self._pool: ThreadPoolExecutor | None = None
        self._threads = 0
        self._newest: NewestRun | None = None
        self._copying: object | None = None
        """The copy under way: one still under way when the next starts was abandoned by
        the loop as hung, and its writers may still be using the kept clients."""

    def copy(self, flow: Flow, run_id: str, writers: dict[int, list[Range]],
             lanes: list[list[int]], role: str, owner: Named | None = None,
             topics: Collection[str] = ()) -> list[RunRow]:
        """Copy `writers`' ranges, lane `i` running the slots `lanes[i]`: their `runs` rows,
        as the Spark tasks would return them. `flow` is the cycle's: a flow whose settings
        changed since the last cycle starts with new clients. `owner`: the run as it names
        itself the flow's newest (default: `run_id`; `slots.name_newest`); a continuous
        run is named with this copy's cycle (`run_id`, `Named.cycle`), so the writers of a
        cycle the loop abandoned as hung, fenced by this one's, yield to it instead of
        taking their slots back (and of fencing this cycle's writers in turn). `topics`: the
        flow's source topics, idle ones too (the plan's), which new clients learn at once."""
        if flow != self.flow:
            log.info("flow %s changed; its kept writers start afresh", flow.name,
                     extra={"flow": flow.name})
            self.close()
            self.flow = flow
        if self._copying is not None:
            log.warning("flow %s: the cycle before is still copying (abandoned as hung); "
                        "its kept writers are left to it, and this cycle's start afresh",
                        flow.name, extra={"flow": flow.name})
            self.abandon()
        self._copying = token = object()
        try:
            return self._copy(flow, run_id, writers, lanes, role, owner, frozenset(topics))
        finally:
            if self._copying is token:
                self._copying = None

    def _copy(self, flow: Flow, run_id: str, writers: dict[int, list[Range]],
              lanes: list[list[int]], role: str, owner: Named | None,
              topics: frozenset[str]) -> list[RunRow]:
        from ferry.runtime.slots import write_slots

        me = cycle_named(owner, run_id)
        newest = self._newest_run(role)
        named = newest.read()
        if names_itself(named, me):
            newest.name(me)
        elif writing(named):
            assert named is not None
            log.info("flow %s: positions are being written outside a copy (%s); this cycle "
                     "leaves them its slots, and a cycle after they are written plans from "
                     "them", flow.name, named.run, extra={"flow": flow.name})
        pool = self._pool_of(len(lanes))

        def lane(index: int, slots: list[int]) -> list[RunRow]:
            return write_slots(flow, run_id, [(s, writers[s]) for s in slots], role,
                               writer=self._writer(role, index, topics, newest, me),
                               newest=newest, owner=me)

        rows: list[RunRow] = []
        for done in [pool.submit(lane, i, slots) for i, slots in enumerate(lanes)]:
            rows.extend(done.result())
        return rows

    def _writer(self, role: str, lane: int, topics: frozenset[str], newest: NewestRun,
                me: Named) -> Callable[..., Lane]:
        """Makes a slot's writer, run by lane `lane`, its client source (`Lane` `clients`)
        the clients the slot kept with the lane's consumer and reader (`KeptClients`); one
        that would initialise its id again mid-copy reads the flow's newest run first, and
        yields to a newer one (`Lane` `newest`)."""
        from ferry.core.internal import transactional_id
        from ferry.core.lanes import writer_of
        from ferry.kafka.lane import Lane

        slots = self._slots  # a copy abandoned later keeps to the clients it started with
        readers = self._readers.setdefault((role, lane), LaneReaders())

        def writer(flow: Flow, ranges: list[Range], run_id: str, **kwargs: Any) -> Lane:
            make = self._make or Lane
            if not ranges:  # nothing to write: no clients either
                return make(flow, ranges, run_id, **kwargs)
            slot = writer_of(ranges[0].topic, ranges[0].partition, flow.ferry.writers)
            kept = slots.get((role, slot))
            if kept is None:
                kept = slots[(role, slot)] = KeptClients(
                    transactional_id(flow, slot, role), flow=flow.name, slot=slot)
            kept.readers, kept.flow_topics = readers, topics
            return make(flow, ranges, run_id, clients=kept, left_behind=self.left_behind,
                        **kwargs)

        return writer

    def _newest_run(self, role: str) -> NewestRun:
        from ferry.kafka.runs import NewestRun

        if self._newest is None or self._newest.role != role:
            if self._newest is not None:
                self._newest.__exit__(None, None, None)
            self._newest = NewestRun(self.flow, role)
        return self._newest

    def _pool_of(self, lanes: int) -> ThreadPoolExecutor:
        if self._pool is None or self._threads < lanes:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(max(lanes, 1), thread_name_prefix=
                                            f"ferry lane {self.flow.name}")
            self._threads = max(lanes, 1)
        return self._pool

    def abandon(self) -> None:
        """Forget every kept client without waiting for the threads that hold them (a cycle
        the loop gave up on as hung): the next writers make new ones and fence them."""
        self._slots, self._readers = {}, {}
        self._pool, self._threads, self._newest = None, 0, None
        self._copying = None

    def close(self) -> None:
        """Drop every kept client and end the lane threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for kept in self._slots.values():
            kept.discard()
        for readers in self._readers.values():
            readers.discard()
        if self._newest is not None:
            self._newest.__exit__(None, None, None)
        self.abandon()

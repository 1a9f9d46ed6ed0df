"""Bounded reads of the state tables that grow every run, for `ferry status`, the Ferry
page and the metrics (adapter: delta-rs + pyarrow).

`runs`, `checkpoints` and `lag` gain rows at every flow run, so after months a flow has
millions. A scrape or a page load must not turn them all into Python objects: these read
aggregates computed by Arrow, and only the rows of the few runs that are shown.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ferry.core.tables import COPIED_BY_RUN

if TYPE_CHECKING:
    import pyarrow.dataset as ds

Row = dict[str, Any]


def _dataset(path: str) -> ds.Dataset | None:
    from ferry.state.reader import dataset, open_table

    table = open_table(path)
    return None if table is None else dataset(table, path)


def copied_totals(path: str, flow: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(source topic, partition) -> (records, bytes) of every range the flow copied (the
    `runs` table; failed and handed-over ranges count nothing)."""
    import pyarrow.dataset as ds

    data = _dataset(path)
    if data is None:
        return {}
    table = data.to_table(columns=["topic", "partition", "records", "bytes"],
                          filter=(ds.field("flow") == flow)
                          & ds.field("outcome").isin(sorted(o.value for o in COPIED_BY_RUN)))
    sums = table.group_by(["topic", "partition"]).aggregate([("records", "sum"),
                                                              ("bytes", "sum")])
    return {(t, p): (int(r or 0), int(b or 0)) for t, p, r, b in zip(
        *(sums.column(c).to_pylist() for c in ("topic", "partition", "records_sum",
                                               "bytes_sum")), strict=True)}


def recent_runs(path: str, flow: str, newest: int = 10) -> list[Row]:
    """Every `runs` row of the flow's `newest` runs, and of each partition's latest run
    that copied it (the ages MM2's metrics report)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    data = _dataset(path)
    if data is None:
        return []
    mine = ds.field("flow") == flow
    index = data.to_table(columns=["run_id", "topic", "partition", "finished_at", "outcome"],
                          filter=mine)
    if index.num_rows == 0:
        return []
    by_run = index.group_by("run_id").aggregate([("finished_at", "max")]).sort_by(
        [("finished_at_max", "descending"), ("run_id", "descending")])
    wanted = set(by_run.column("run_id").to_pylist()[:newest])
    copied = index.filter(pc.field("outcome").isin(sorted(o.value for o in COPIED_BY_RUN)))
    if copied.num_rows:
        latest = copied.group_by(["topic", "partition"]).aggregate([("finished_at", "max")])
        joined = copied.join(latest, keys=["topic", "partition"])
        wanted |= set(joined.filter(pc.equal(joined.column("finished_at"),
                                             joined.column("finished_at_max")))
                      .column("run_id").to_pylist())
    found: list[Row] = data.to_table(
        filter=mine & ds.field("run_id").isin(sorted(wanted))).to_pylist()
    return found


def latest_checkpoints(path: str, flow: str) -> list[Row]:
    """The newest translation time of each group partition: rows of `group_id`,
    `source_topic`, `source_partition`, `translated_at`."""
    import pyarrow.dataset as ds

    data = _dataset(path)
    if data is None:
        return []
    keys = ["group_id", "source_topic", "source_partition"]
    table = data.to_table(columns=[*keys, "translated_at"], filter=ds.field("flow") == flow)
    newest = table.group_by(keys).aggregate([("translated_at", "max")])
    return [{**{k: row[k] for k in keys}, "translated_at": row["translated_at_max"]}
            for row in newest.to_pylist()]


def lag_points(path: str, flow: str, since: datetime) -> list[Row]:
    """The flow's lag history from `since` on, one row per recorded run: `run_id`,
    `recorded_at`, `lag_records` (summed over partitions), `lag_seconds` (the largest)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    data = _dataset(path)
    if data is None:
        return []
    bound = pa.scalar(since, type=pa.timestamp("us", tz="UTC"))
    table = data.to_table(columns=["run_id", "recorded_at", "lag_records", "lag_seconds"],
                          filter=(ds.field("flow") == flow) & (ds.field("recorded_at") >= bound))
    points = table.group_by(["run_id", "recorded_at"]).aggregate(
        [("lag_records", "sum"), ("lag_seconds", "max")])
    return [{"run_id": r["run_id"], "recorded_at": r["recorded_at"],
             "lag_records": r["lag_records_sum"], "lag_seconds": r["lag_seconds_max"]}
            for r in points.to_pylist()]


def newest(path: str, flow: str, column: str) -> datetime | None:
    """The largest value of a timestamp `column` among the flow's rows (None: no rows)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    data = _dataset(path)
    if data is None:
        return None
    values = data.to_table(columns=[column], filter=ds.field("flow") == flow).column(column)
    found: datetime | None = pc.max(values).as_py() if len(values) else None
    return found

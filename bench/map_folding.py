"""Folding the Delta offset map: what a look-up reads before and after maintenance folds
a day (or more) of one-second transactions (no brokers: the Delta table and the look-up
core `ferry offsets` and checkpoint translation run on).

    .venv/bin/python bench/map_folding.py [--days 1] [--partitions 4] [--per-second 1]
                                          [--run-hours 1] [--dir DIR]

It writes `--days` of offset-map rows of one flow as a continuous loop's recorder leaves
them (one entry per partition per transaction, `--per-second` transactions a second, a run
every `--run-hours` (an `@continuous` DAG run's turn), committed more than an hour ago),
compacted as the daily maintenance used to leave them. Then, before and after `ferry
maintain` folds the settled entries, it times what a look-up of one partition does with
Delta: read the flow's rows of the topic (`DeltaStore.map_rows`, as checkpoint
translation does), resolve the partition's entries (`latest_cover`), answer 1,000 random
offsets (`covering`) and one translation (`translate`); and what `ferry offsets` and a
translation read and resolve a minute behind the end (the rows ending after the offset,
`MapWindow`). Printed: rows, files, bytes, each time, and the maintenance run's time.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from ferry.core.checkpoints import translate
from ferry.core.offsetmap import MapEntry, MapWindow, Segment, covering, latest_cover
from ferry.core.retention import CompactionPolicy
from ferry.core.tables import OFFSET_MAP_DDL, offset_map_row
from ferry.state.maintain import data_files, maintain_table
from ferry.state.reader import map_rows
from ferry.state.writer import arrow_schema

FLOW = "edge->central"
RECORDS = 50
"""Records per transaction per partition: 200 records/s over 4 partitions."""


def write_rows(path: str, args: argparse.Namespace) -> int:
    """Hourly appends of the days' entries (compaction joins them anyway); returns the
    entries written."""
    import pyarrow as pa
    from deltalake import write_deltalake

    schema = arrow_schema(OFFSET_MAP_DDL)
    start_ms = int((time.time() - args.days * 86_400 - 7_200) * 1000)
    per_hour = int(3600 * args.per_second)
    hours = int(args.days * 24)
    offset = 0
    for hour in range(hours):
        rows: list[dict[str, Any]] = []
        run = f"run-{int(hour // args.run_hours)}"
        for n in range(hour * per_hour, (hour + 1) * per_hour):
            at = start_ms + int(n * 1000 / args.per_second)
            for partition in range(args.partitions):
                source, target = n * RECORDS, n * (RECORDS + 1)
                entry = MapEntry(FLOW, run, partition, "orders", partition, "edge.orders",
                                 partition, source, source + RECORDS,
                                 (Segment(source, target, RECORDS),), at, bytes=RECORDS * 100,
                                 target_end=target + RECORDS, source_id="S", target_id="T")
                rows.append(offset_map_row(entry, "ferry-offset-map.edge.internal", offset,
                                           "M"))
                offset += 1
        write_deltalake(path, pa.Table.from_pylist(rows, schema=schema), mode="append",
                        partition_by=["flow"])
    return offset


def look_up(path: str, count: int, lookups: int = 1000) -> dict[str, float]:
    """Times of one partition's look-up: read, resolve, answer, translate (fresh reads)."""
    started = time.perf_counter()
    found = map_rows(path, FLOW, ["orders"])
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    entries = latest_cover([(r.offset, r.entry) for r in found
                            if r.entry.source_partition == 0])
    resolve_s = time.perf_counter() - started
    rnd = random.Random(1)
    offsets = [rnd.randrange(count * RECORDS) for _ in range(lookups)]
    started = time.perf_counter()
    for offset in offsets:
        hit = covering(entries, offset)
        assert hit is not None and hit[1] is not None, offset
    lookup_ms = (time.perf_counter() - started) * 1000 / lookups
    started = time.perf_counter()
    assert translate(entries, count * RECORDS // 2) is not None
    translate_ms = (time.perf_counter() - started) * 1000
    # `ferry offsets` of a record a minute old, and a translation of a group a minute
    # behind: only the rows ending after the offset are read
    recent = count * RECORDS - 60 * RECORDS
    started = time.perf_counter()
    near = latest_cover([(r.offset, r.entry) for r in
                         map_rows(path, FLOW, ["orders"], [MapWindow("orders", 0, recent)])])
    hit = covering(near, recent)
    window_ms = (time.perf_counter() - started) * 1000
    assert hit is not None and hit == covering(entries, recent), recent
    assert translate(near, recent) == translate(entries, recent)
    return {"rows": len(found), "read_s": read_s, "resolve_s": resolve_s,
            "lookup_ms": lookup_ms, "translate_ms": translate_ms, "window_ms": window_ms}


def table_size(path: str) -> tuple[int, int]:
    from deltalake import DeltaTable

    files = data_files(DeltaTable(path))
    return len(files), sum(f.bytes for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-second", type=float, default=1.0)
    parser.add_argument("--run-hours", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()

    root = Path(args.dir or tempfile.mkdtemp(prefix="ferry-map-folding-"))
    path = str(root / "offset_map")
    shutil.rmtree(path, ignore_errors=True)
    started = time.perf_counter()
    written = write_rows(path, args)
    per_partition = written // args.partitions
    print(f"{written:,} entries written ({args.days:g} day(s), {args.partitions} partitions, "
          f"{args.per_second:g} transactions/s, a run every {args.run_hours:g} h) in "
          f"{time.perf_counter() - started:.0f} s")
    # what the daily maintenance left before folding: compacted, every entry a row
    unfolded = CompactionPolicy(min_small_files=2, fold_after_s=10**9)
    maintain_table(path, "offset_map", 168, policy=unfolded)
    rows: list[tuple[str, dict[str, float], tuple[int, int], float]] = []
    rows.append(("compacted, unfolded", look_up(path, per_partition), table_size(path), 0.0))
    started = time.perf_counter()
    report = maintain_table(path, "offset_map", 168,
                            policy=CompactionPolicy(min_small_files=2))
    took = time.perf_counter() - started
    assert report.folded, "nothing was folded"
    rows.append(("folded (ferry maintain)", look_up(path, per_partition), table_size(path),
                 took))
    print("| table | rows | files | bytes | maintenance | read a topic's rows | resolve | "
          "look-up | translation | a look-up or translation a minute behind |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, t, (files, size), spent in rows:
        print(f"| {name} | {int(t['rows']):,} | {files} | {size / 2**20:.1f} MiB | "
              f"{spent:.1f} s | {t['read_s'] * 1000:,.0f} ms | {t['resolve_s'] * 1000:,.0f} ms"
              f" | {t['lookup_ms']:.3f} ms | {t['translate_ms']:.0f} ms | "
              f"{t['window_ms']:.0f} ms |")
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

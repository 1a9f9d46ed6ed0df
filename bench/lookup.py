"""Look-up benchmark: what answering from the offset map costs as it grows with
sub-second commits (no brokers: the pure core that `ferry offsets`, checkpoint translation
and failover run on a partition's entries once they are read).

A continuous loop commits a transaction per cycle, so each partition it copies gets an
offset-map entry per cycle: at 200 records/s over 4 partitions and a cycle every 0.5 s,
about 172,800 entries per partition per day. For `--days` of them, one partition, it times:

- resolving the entries (`latest_cover`: overlaps to the later written, in source order),
  which every look-up, translation and verify does first;
- `--lookups` look-ups of random offsets (`covering`, as `ferry offsets` answers);
- one checkpoint translation (`translate`, as the checkpoints step does per group partition).

    .venv/bin/python bench/lookup.py [--days 1] [--per-second 2] [--lookups 1000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from ferry.core.checkpoints import translate
from ferry.core.offsetmap import MapEntry, Segment, covering, latest_cover


def day_of_entries(count: int, records: int) -> list[tuple[tuple[int, int], MapEntry]]:
    """`count` adjacent entries of one partition, `records` records each, one segment
    each (a commit marker between transactions on the target), with their order keys."""
    entries = []
    for i in range(count):
        start, target = i * records, i * (records + 1)
        entries.append(((0, i), MapEntry(
            "src->tgt", f"run-{i // 7200}", 0, "orders", 0, "src.orders", 0, start,
            start + records, (Segment(start, target, records),), 1_700_000_000_000 + i * 500,
            bytes=records * 100, target_end=target + records)))
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--per-second", type=float, default=2.0,
                        help="transactions per second per partition (a cycle every 0.5 s)")
    parser.add_argument("--records", type=int, default=25,
                        help="records per entry (200/s over 4 partitions, 2 cycles/s)")
    parser.add_argument("--lookups", type=int, default=1000)
    args = parser.parse_args()

    count = int(args.days * 86_400 * args.per_second)
    entries = day_of_entries(count, args.records)
    started = time.perf_counter()
    resolved = latest_cover(entries)
    resolve_s = time.perf_counter() - started

    rnd = random.Random(1)
    offsets = [rnd.randrange(count * args.records) for _ in range(args.lookups)]
    started = time.perf_counter()
    for offset in offsets:
        found = covering(resolved, offset)
        assert found is not None and found[1] is not None, offset
    lookup_ms = (time.perf_counter() - started) * 1000 / args.lookups

    started = time.perf_counter()
    assert translate(resolved, count * args.records // 2) is not None
    translate_ms = (time.perf_counter() - started) * 1000

    print(f"entries of one partition: {count:,} ({args.days:g} day(s) at "
          f"{args.per_second:g} transactions/s)")
    print(f"resolve (latest_cover): {resolve_s:.2f} s")
    print(f"look-up (covering): {lookup_ms:.3f} ms each, over {args.lookups:,}")
    print(f"checkpoint translation (translate): {translate_ms:.0f} ms")


if __name__ == "__main__":
    main()

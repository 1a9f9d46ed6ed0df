"""Partition-scale benchmark: topics with 1,000 partitions in all, a few new records in
each, mirrored by one `ferry mirror` cycle (target: under 60 s here), then an idle cycle.

    .venv/bin/python bench/scale.py [--topics 10] [--partitions 100] [--per-partition 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import create_topic, ferry_mirror, local_clusters, produce, write_config
from ferry.state.reader import rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--per-partition", type=int, default=5)
    args = parser.parse_args()
    total_parts = args.topics * args.partitions
    records = total_parts * args.per_partition
    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as tmp, \
            local_clusters(Path(tmp) / "kafka") as clusters:
        for t in range(args.topics):
            create_topic(clusters["source"], f"scale-{t}", args.partitions)
            produce(clusters["source"], f"scale-{t}", args.partitions,
                    args.partitions * args.per_partition, 200, processes=1)
        config = write_config(Path(tmp) / "mm2.properties", clusters, "scale-.*",
                              Path(tmp) / "state")
        print(f"scale: {args.topics} topics, {total_parts:,} partitions, {records:,} records")
        seconds, _ = ferry_mirror(config)
        copied = sum(r["records"] for r in rows(str(Path(tmp) / "state" / "runs"),
                                                "source->target"))
        assert copied == records, f"copied {copied} of {records}"
        print(f"  first cycle (topics created, JVM incl.)  {seconds:.1f} s  (target < 60 s)")
        produce(clusters["source"], "scale-0", args.partitions, args.partitions, 200,
                processes=1)
        seconds, _ = ferry_mirror(config)
        print(f"  second cycle ({args.partitions} new records)     {seconds:.1f} s")
        seconds, result = ferry_mirror(config)
        print(f"  idle cycle                               {seconds:.1f} s "
              f"(idle={result['idle']}, target < 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory benchmark: the copy's peak memory (the whole `ferry mirror` process tree: the
CLI, the spark-submit JVM, the Python workers) for 1,000,000 and 4,000,000 records of
1 KiB; target: the larger within 20% of the smaller (memory stays flat).

    .venv/bin/python bench/memory.py [--small 1000000] [--large 4000000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import create_topic, local_clusters, produce, write_config


def peak_rss(command: list[str]) -> tuple[int, float, int]:
    """Run `command`; (peak RSS of its process tree in bytes, seconds, exit code)."""
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    done.set()
    sampler.join()
    return peak, time.monotonic() - started, code


def measure(records: int) -> int:
    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as tmp, \
            local_clusters(Path(tmp) / "kafka") as clusters:
        create_topic(clusters["source"], "mem", 8, {"retention.ms": "-1"})
        produce(clusters["source"], "mem", 8, records, 1024)
        config = write_config(Path(tmp) / "mm2.properties", clusters, "mem",
                              Path(tmp) / "state")
        ferry = str(Path(sys.executable).parent / "ferry")
        peak, seconds, code = peak_rss([ferry, "mirror", config, "--flow", "source->target"])
        assert code == 0, "ferry mirror failed"
        print(f"  {records:>10,} records: peak {peak / 2**20:,.0f} MiB over the process tree "
              f"({seconds:.0f} s)")
        return peak


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--large", type=int, default=4_000_000)
    args = parser.parse_args()
    print("memory: peak RSS of one `ferry mirror` cycle (CLI + spark-submit JVM + workers)")
    small, large = measure(args.small), measure(args.large)
    print(f"  large / small = {large / small:.2f}  (target <= 1.20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""First cycles on fresh clusters: the first client of a group coordinator meets
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS. librdkafka's
admin ListConsumerGroupOffsets dereferences the client's (absent) consumer group on the
first two and kills the process with SIGSEGV in its own thread (confluentinc/librdkafka#5040:
rd_kafka_cgrp_op <- rd_kafka_handle_OffsetFetch), where no Python handler can run. Ferry
reads group offsets with a consumer of the group that never joins it."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ferry.local import cluster
from tests.support.kafka_data import create_topic, produce

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# librdkafka's own mock cluster (in the wheel's librdkafka, reached with ctypes): the one
# broker that can be told to answer the next OffsetFetch requests with chosen errors. The
# real-broker test below meets the same answers by chance; this one every time.
MOCK_CHILD = textwrap.dedent(r'''
    import ctypes, glob, os, sys
    import confluent_kafka
    from ferry.config.clients import ClientConfig
    from ferry.kafka.admin import Admin

    lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(confluent_kafka.__file__), "..",
                                             "confluent_kafka.libs", "librdkafka*.so*"))[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                               ctypes.c_int]
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(ctypes.c_void_p(conf), b"log_level", b"0", None, ctypes.c_size_t(0))
    rk = lib.rd_kafka_new(0, conf, ctypes.create_string_buffer(512), 512)
    mock = lib.rd_kafka_mock_cluster_new(rk, 1)
    lib.rd_kafka_mock_topic_create(mock, b"source.orders", 2, 1)
    errors = [int(e) for e in sys.argv[1:]]
    # the next OffsetFetch requests (API key 9) are answered with these group errors
    lib.rd_kafka_mock_push_request_errors(ctypes.c_void_p(mock), ctypes.c_int16(9),
                                          ctypes.c_size_t(len(errors)),
                                          *[ctypes.c_int(e) for e in errors])
    bootstrap = lib.rd_kafka_mock_cluster_bootstraps(mock).decode()
    admin = Admin(ClientConfig("target", "admin", {"bootstrap.servers": bootstrap}), timeout=10)
    print(admin.committed("__ferry-positions.source",
                          [("source.orders", 0), ("source.orders", 1)]), flush=True)
''')


@pytest.mark.parametrize("errors", [[16], [15], [16, 15, 14]],
                         ids=["NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "one-after-another"])
def test_reading_positions_from_a_coordinator_not_ready_waits_instead_of_crashing(
        errors: list[int]) -> None:
    child = subprocess.run([sys.executable, "-c", MOCK_CHILD, *map(str, errors)],
                           capture_output=True, text=True, timeout=120, check=False)

    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"
    assert child.stdout.strip().splitlines()[-1] == "{}"


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def test_first_cycles_on_new_clusters_and_new_topics_all_exit_0(tmp_path: Path) -> None:
    results = []
    for attempt in range(4):
        # given: two clusters just started, nothing has used the target's group coordinator
        root = tmp_path / f"pair-{attempt}"
        states = {s.alias: s for s in cluster.up(("source", "target"), root, wait=False)}
        try:
            deadline = time.monotonic() + 90
            while not all(_listening(s.port) for s in states.values()):
                assert time.monotonic() < deadline, "the brokers never listened"
                time.sleep(0.05)
            source = states["source"].bootstrap
            for t in range(2):
                create_topic(source, f"orders{t}", 3)
                produce(source, f"orders{t}", [(None, b"v", i % 3) for i in range(30)])
            config = tmp_path / f"mm2-{attempt}.properties"
            config.write_text(
                f"clusters = source, target\nsource.bootstrap.servers = {source}\n"
                f"target.bootstrap.servers = {states['target'].bootstrap}\n"
                "source->target.enabled = true\nsource->target.topics = orders.*\n"
                "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
                "emit.heartbeats.enabled = false\n"
                f"ferry.state.dir = {tmp_path / f'state-{attempt}'}\n")

            # when: the first cycle runs at once (in a process of its own: a crash kills it)
            cycle = subprocess.run(
                [sys.executable, "-m", "tests.integration.cycle_main", str(config),
                 "source->target"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                check=False)
            results.append((cycle.returncode, cycle.stderr))
        finally:
            cluster.down(root, wipe=True)

    # then
    assert [code for code, _ in results] == [0] * 4, "\n\n".join(
        f"attempt {n}: exit {code}\n{stderr}" for n, (code, stderr) in enumerate(results) if code)

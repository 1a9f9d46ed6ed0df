"""`ferry spark up` hands out a server only once that very server listens: a port another
process holds (taken between the free-port check and the server's bind, as two `up`s
started together do) is never taken for the new server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.errors import TransientError
from ferry.local import spark_server

pytestmark = pytest.mark.spark_submit  # starts servers of its own, not the session's


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process listens on."""
    with socket.socket() as sock:
        sock.bind((spark_server.HOST, 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_port_another_process_listens_on_is_refused_naming_the_port(
    held_port: int, tmp_path: Path
) -> None:
    with pytest.raises(TransientError, match=f"port {held_port} .*in use"):
        spark_server.up(tmp_path, port=held_port)

    _, running = spark_server.status(tmp_path)
    assert not running


def test_a_default_port_taken_just_before_the_server_binds_it_moves_to_a_free_one(
    held_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the default port looked free when `up` checked it, and another server took it
    # before this one bound it (forced: the check says free, the port is held)
    monkeypatch.setattr(spark_server, "DEFAULT_PORT", held_port)
    monkeypatch.setattr(spark_server, "_port_free", lambda port: True)

    state = spark_server.up(tmp_path)
    try:
        assert state.port != held_port
        assert spark_server.is_ours(state)
        assert spark_server.load(tmp_path) == state
        with socket.create_connection((spark_server.HOST, state.port), timeout=5):
            pass
    finally:
        spark_server.down(tmp_path)

"""A broker still starting, forced instead of waited for: a loopback proxy in front of a
real broker whose first connections get an ApiVersions answer that lists no API but
ApiVersions itself, and no further answer. librdkafka keeps a connection's ApiVersions
answer for the connection's life, so every later request on it fails locally with
`_UNSUPPORTED_FEATURE` ("Required feature not supported by broker"), as the first cycle on
a Kafka 4 cluster just started once met in the suite. Later connections are piped to the
broker unchanged."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

API_VERSIONS = 18


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return bytes(out + bytes([low]))
        out.append(low | 0x80)


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("the client closed the connection")
        data += chunk
    return data


def only_api_versions(correlation_id: int) -> bytes:
    """A whole ApiVersions v3+ response frame (header v0, flexible body) that lists only
    ApiVersions 0..3: error 0, one API key, no throttle, no tagged fields."""
    body = (struct.pack(">h", 0) + _uvarint(2) + struct.pack(">hhh", API_VERSIONS, 0, 3)
            + _uvarint(0) + struct.pack(">i", 0) + _uvarint(0))
    frame = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(frame)) + frame


@dataclass
class StartingBroker:
    """Fronts the broker at `upstream` (host:port); `crippled` connections are left."""

    upstream: str
    crippled: int
    served: int = 0
    _server: socket.socket = field(default_factory=socket.socket)
    _held: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self._server.getsockname()[1]}"

    def start(self) -> None:
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen()
        threading.Thread(target=self._accept, daemon=True, name="starting-broker").start()

    def close(self) -> None:
        for sock in [self._server, *self._held]:
            with suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            cripple = self.crippled > 0
            if cripple:
                self.crippled -= 1
                self.served += 1
                self._held.append(client)
        if cripple:
            with suppress(OSError, EOFError):
                size = struct.unpack(">i", _read(client, 4))[0]
                request = _read(client, size)
                api_key, _, correlation_id = struct.unpack(">hhi", request[:8])
                assert api_key == API_VERSIONS, f"first request was API {api_key}"
                client.sendall(only_api_versions(correlation_id))
            return  # held open and silent, as librdkafka found the connection usable
        host, port = self.upstream.rsplit(":", 1)
        broker = socket.create_connection((host, int(port)))
        with self._lock:
            self._held += [client, broker]
        threading.Thread(target=_pipe, args=(client, broker), daemon=True).start()
        _pipe(broker, client)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def starting_broker(upstream: str, crippled: int = 1) -> Iterator[StartingBroker]:
    """A `StartingBroker` in front of `upstream`, listening until the block ends."""
    proxy = StartingBroker(upstream, crippled)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()

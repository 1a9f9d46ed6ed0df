"""Kafka's `protocol.types` for MM2's internal records (big-endian; STRING = int16 length
+ UTF-8, non-null), shared by checkpoints and heartbeats."""

from __future__ import annotations

import struct


def string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for Kafka's STRING")
    return struct.pack(">h", len(data)) + data


class Reader:
    """Reads fields in order; ValueError when the bytes run out or a length is bad."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ValueError("truncated")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values

    def string(self) -> str:
        (length,) = self.take(">h")
        if length < 0 or self.at + length > len(self.data):
            raise ValueError("bad string")
        text = self.data[self.at:self.at + length].decode()
        self.at += length
        return text

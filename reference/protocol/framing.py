"""Kafka's framing, sans-IO: every request and response is an int32 big-endian size followed by
that many bytes (the frame body: header, then message body).

FrameDecoder takes bytes as they arrive from a socket, in pieces of any size, and returns the
complete frame bodies. A frame that lies within one received piece is returned as a
zero-copy memoryview of it; one that spans pieces is joined into bytes once.
"""
from __future__ import annotations

from reference.protocol.primitives import INT32

FRAME_SIZE_BYTES = 4


class FrameTooLarge(ValueError):
    """A frame size above the limit, or negative: the peer is broken or hostile; close."""

    def __init__(self, size_bytes: int, max_frame_bytes: int):
        self.size_bytes = size_bytes
        self.max_frame_bytes = max_frame_bytes
        super().__init__(f"frame size {size_bytes} bytes is outside 0..{max_frame_bytes} (max_frame_bytes)")


class FrameDecoder:
    """Splits a byte stream into frame bodies of at most `max_frame_bytes` each."""

    def __init__(self, max_frame_bytes: int):
        assert max_frame_bytes > 0, max_frame_bytes
        self.max_frame_bytes = max_frame_bytes
        self._pending: list[memoryview] = []  # received pieces not yet returned, in order
        self._pending_bytes = 0

    def buffered_bytes(self) -> int:
        return self._pending_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | memoryview]:
        """The frame bodies completed by `data`, in order; raises FrameTooLarge."""
        if isinstance(data, bytearray):
            data = bytes(data)  # the caller may reuse its buffer; frames must not change under us
        if len(data):
            self._pending.append(memoryview(data).cast("B"))
            self._pending_bytes += len(self._pending[-1])
        frames: list[bytes | memoryview] = []
        while self._pending_bytes >= FRAME_SIZE_BYTES:
            head = self._pending[0] if len(self._pending[0]) >= FRAME_SIZE_BYTES else self._peek(FRAME_SIZE_BYTES)
            (size,) = INT32.unpack_from(head, 0)
            if size < 0 or size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            if self._pending_bytes < FRAME_SIZE_BYTES + size:
                break
            frames.append(self._take(FRAME_SIZE_BYTES + size)[FRAME_SIZE_BYTES:])
        return frames

    def _peek(self, size: int) -> bytes:
        return b"".join(self._pending)[:size]

    def _take(self, size: int) -> bytes | memoryview:
        """Removes and returns the first `size` pending bytes."""
        first = self._pending[0]
        self._pending_bytes -= size
        if len(first) >= size:
            if len(first) == size:
                self._pending.pop(0)
            else:
                self._pending[0] = first[size:]
            return first[:size]
        taken = bytearray()
        while len(taken) < size:
            piece = self._pending[0]
            needed = size - len(taken)
            taken += piece[:needed]
            if len(piece) <= needed:
                self._pending.pop(0)
            else:
                self._pending[0] = piece[needed:]
        return bytes(taken)

"""Kafka's framing, sans-IO: every request and response is an int32 big-endian size followed by
that many bytes (the frame body: header, then message body).

FrameDecoder owns the memory bytes are received into, in the style of asyncio's
BufferedProtocol: `get_buffer()` is where the next bytes should go (a socket's recv_into
writes there), `buffer_updated(n)` says n bytes arrived and returns the frame bodies they
complete. `feed(data)` does the same for bytes received elsewhere (tests, clients).

Small frames share one read buffer, so one read can complete many of them. A frame that
does not fit gets a buffer that grows as its bytes arrive: four times what has arrived, up
to the frame's declared size, so a peer that declares 100 MiB and stalls holds at most eight
times what it sent, not what it declared (Kafka bounds the same with queued.max.request.bytes and a
memory pool). Growing copies a third of a frame in all; the last buffer is the frame's own,
so the handler still gets it without a join. Every frame is returned as a memoryview of a
buffer the decoder does not touch while any view of it is alive, so the frame is the
handler's: the leader writes offsets into a produced batch where it lies, as Kafka's
LogValidator does for batches it need not recompress.

A large frame's buffer is kept once the frame is returned (`_spare`), and the next large
frame that fits in it is received there as soon as its size is known, once no view of the
old frame is left (a bytearray that cannot be resized is still viewed). A producer's 1 MB
requests then cost no allocation, no zero-filling and no growth copies; the memory kept is
one frame the peer has sent in full, never more than it declared.
"""
from __future__ import annotations

from reference.protocol.primitives import INT32

FRAME_SIZE_BYTES = 4
READ_BUFFER_BYTES = 64 * 1024  # the shared buffer for small frames, and the most one read asks for them
FRAME_BUFFER_GROWTH = 4  # a large frame's buffer grows to this many times what has arrived of it


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
        self._buffer = bytearray(READ_BUFFER_BYTES)
        self._start = 0  # the first byte received and not yet returned in a frame
        self._end = 0  # one past the last byte received
        self._spare: bytearray | None = None  # the last large frame's buffer, for the next one

    def buffered_bytes(self) -> int:
        return self._end - self._start

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go; never empty."""
        assert self._end < len(self._buffer), (self._end, len(self._buffer))
        return memoryview(self._buffer)[self._end:]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """`nbytes` were written at the start of `get_buffer()`: the frame bodies they complete,
        in order; raises FrameTooLarge."""
        assert 0 < nbytes <= len(self._buffer) - self._end, (nbytes, len(self._buffer), self._end)
        self._end += nbytes
        frames = []
        view = memoryview(self._buffer)
        needed_bytes = FRAME_SIZE_BYTES  # for the pending frame: its size, then its whole frame
        while self._end - self._start >= FRAME_SIZE_BYTES:
            (size,) = INT32.unpack_from(self._buffer, self._start)
            if size < 0 or size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            needed_bytes = FRAME_SIZE_BYTES + size
            if self._end - self._start < needed_bytes:
                break
            frames.append(view[self._start + FRAME_SIZE_BYTES:self._start + needed_bytes])
            self._start += needed_bytes
            needed_bytes = FRAME_SIZE_BYTES
        if len(self._buffer) > READ_BUFFER_BYTES and frames:
            self._spare = self._buffer  # a large frame's; the pending bytes move out below
        spare = self._spare
        if (spare is not None and spare is not self._buffer and needed_bytes <= len(spare)
                and len(self._buffer) - self._start < needed_bytes and _unviewed(spare)):
            # A large frame whose size is known goes straight into the spare buffer.
            spare[:self._end - self._start] = view[self._start:self._end]
            self._buffer, self._start, self._end = spare, 0, self._end - self._start
        elif frames or self._end == len(self._buffer):
            # The frames returned keep this buffer as it is; the pending bytes move to a new one
            # with room for FRAME_BUFFER_GROWTH times what has arrived of the pending frame, or
            # for all of it when that is at most twice as much.
            capacity_bytes = FRAME_BUFFER_GROWTH * (self._end - self._start)
            if 2 * capacity_bytes > needed_bytes:  # one growth short of the frame: room for all of it
                capacity_bytes = needed_bytes
            self._move_pending(max(READ_BUFFER_BYTES, capacity_bytes))
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """The frame bodies completed by `data` (copied in), in order; raises FrameTooLarge."""
        data = memoryview(data).cast("B")
        frames = []
        while data:
            buffer = self.get_buffer()
            nbytes = min(len(buffer), len(data))
            buffer[:nbytes] = data[:nbytes]
            frames += self.buffer_updated(nbytes)
            data = data[nbytes:]
        return frames

    def _move_pending(self, capacity_bytes: int) -> None:
        pending_bytes = self._end - self._start
        assert pending_bytes < capacity_bytes, (pending_bytes, capacity_bytes)
        buffer = bytearray(capacity_bytes)
        buffer[:pending_bytes] = memoryview(self._buffer)[self._start:self._end]
        self._buffer, self._start, self._end = buffer, 0, pending_bytes


def _unviewed(buffer: bytearray) -> bool:
    """No memoryview of `buffer` is alive: a bytearray with one cannot change size (BufferError).
    Popping its last byte and putting it back changes nothing else, and reallocates nothing."""
    try:
        last = buffer.pop()
    except BufferError:
        return False
    buffer.append(last)
    return True

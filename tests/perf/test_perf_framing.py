"""The broker's receive path copies nothing it need not: FrameDecoder's buffers, and a real socket."""
from __future__ import annotations

import socket
import struct
import threading

import pytest

from reference.protocol.framing import READ_BUFFER_BYTES, FrameDecoder, FrameTooLarge


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def receive(decoder: FrameDecoder, connection: socket.socket) -> list[memoryview]:
    """What the broker's shell does: recv_into the decoder's buffer, then ask for frames."""
    received = connection.recv_into(decoder.get_buffer())
    assert received > 0
    return decoder.buffer_updated(received)


def test_a_large_frame_is_received_into_one_buffer_of_its_exact_size():
    body = bytes(range(256)) * 4096  # 1 MiB, far above the shared read buffer
    decoder = FrameDecoder(max_frame_bytes=2 << 20)
    left, right = socket.socketpair()
    with left, right:
        sender = threading.Thread(target=right.sendall, args=(frame(body) + frame(b"next"),))
        sender.start()  # more than the socket buffers hold: sent while the frames are received
        frames = []
        while len(frames) < 2:
            frames += receive(decoder, left)
        sender.join()
    big, small = frames
    assert big == body and small == b"next"
    assert len(big.obj) == 4 + len(body), "the large frame got a buffer of exactly its size"
    assert not big.readonly, "the frame is the handler's: a leader writes offsets into a produced batch in place"
    assert decoder.buffered_bytes() == 0


def test_small_frames_completed_by_one_read_share_its_buffer():
    decoder = FrameDecoder(max_frame_bytes=1000)
    left, right = socket.socketpair()
    with left, right:
        right.sendall(frame(b"a" * 100) + frame(b"b" * 200) + frame(b"c" * 300)[:50])
        first, second = receive(decoder, left)
        assert first.obj is second.obj and len(first.obj) == READ_BUFFER_BYTES
        right.sendall(frame(b"c" * 300)[50:])
        (third,) = receive(decoder, left)
    assert (first, second, third) == (b"a" * 100, b"b" * 200, b"c" * 300)
    assert third.obj is not first.obj, "a buffer that frames were returned from is never written again"


def test_frames_returned_earlier_keep_their_bytes_while_more_arrive():
    decoder = FrameDecoder(max_frame_bytes=READ_BUFFER_BYTES * 2)
    kept = decoder.feed(frame(b"x" * 10) + frame(b"y" * 10)[:7])
    later = decoder.feed(frame(b"y" * 10)[7:] + frame(b"z" * (READ_BUFFER_BYTES + 10)))
    assert kept == [b"x" * 10] and later == [b"y" * 10, b"z" * (READ_BUFFER_BYTES + 10)]


def test_the_size_limit_holds_before_any_buffer_is_allocated():
    decoder = FrameDecoder(max_frame_bytes=1 << 20)
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">i", (1 << 20) + 1))
    assert len(decoder.get_buffer()) <= READ_BUFFER_BYTES


def test_the_next_large_frame_reuses_a_large_buffer_only_once_no_view_of_it_is_left():
    """A producer's 1 MB requests cost no allocation: the next large frame is received into the
    last one's buffer, but never while the handler (or anything) still holds a view of it."""
    first_body, second_body, third_body = b"a" * 300_000, b"b" * 200_000, b"c" * 250_000
    decoder = FrameDecoder(max_frame_bytes=1 << 20)
    (first,) = decoder.feed(frame(first_body))
    buffer = first.obj
    del first  # the request was answered
    (second,) = decoder.feed(frame(second_body))
    assert second.obj is buffer and second == second_body
    (third,) = decoder.feed(frame(third_body))  # `second` is still held: a buffer of its own
    assert third.obj is not buffer and second == second_body and third == third_body
    assert not second.readonly and not third.readonly

"""send_chunks, how every response leaves a broker: the chunks arrive whole and in order over a
real socket, more of them than one sendmsg takes (IOV_MAX) and more bytes than the socket
buffer holds, so the first sendmsg is partial and the rest goes out as the peer reads."""
from __future__ import annotations

import asyncio
import os
import socket

from reference.server.server import SENDMSG_CHUNKS_MAX, send_chunks

WAIT_S = 60.0


def test_many_chunks_larger_than_the_socket_buffer_arrive_whole_and_in_order():
    chunks = [os.urandom(1 + i % 5000) for i in range(3 * SENDMSG_CHUNKS_MAX)]  # about 7.5 MB
    chunks[7] = b""  # an empty chunk is skipped
    chunks[8] = memoryview(os.urandom(70_000))[1000:]  # and a view is sent as it is
    expected = b"".join(bytes(chunk) for chunk in chunks)

    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        sender, receiver = socket.socketpair()
        received = bytearray()
        with sender, receiver:
            for end in (sender, receiver):
                end.setblocking(False)
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # forces partial sends

            async def read_all() -> None:
                while len(received) < len(expected):
                    received.extend(await loop.sock_recv(receiver, 1024 * 1024))

            await asyncio.wait_for(asyncio.gather(send_chunks(sender, chunks), read_all()), WAIT_S)
        return bytes(received)

    assert asyncio.run(scenario()) == expected

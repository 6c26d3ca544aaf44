"""A raw Trio JSON-line server: the baseline the two-process benchmarks are measured against.

Run as ``python echo_server.py SOCKET``. It answers each JSON line with one
JSON line, the object it received decoded and encoded again, the least a
JSON-line server can do per frame. It prints ``ready`` once the socket
accepts connections and runs until it is terminated.

It imports nothing of agentrt, so its figure is what bare Trio and ``json``
cost on this machine.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import trio


async def _serve(stream: trio.SocketStream) -> None:
    buffer = bytearray()
    async with stream:
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return
            if not data:
                return
            buffer += data
            while (newline := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                reply = json.dumps(json.loads(line), separators=(",", ":")).encode() + b"\n"
                await stream.send_all(reply)


async def main(path: str) -> None:
    """Serve `path` until terminated."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(socket.SOMAXCONN)
    listener = trio.SocketListener(sock)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, _serve, [listener])
        print("ready", flush=True)


if __name__ == "__main__":
    target = sys.argv[1]
    if os.path.exists(target):
        os.unlink(target)
    trio.run(main, target)

"""A local model API that streams a long reply of one-token chunks, for the `stream_cpu` row.

Run as ``python sse_server.py CHUNKS``. It prints its port once it listens on
127.0.0.1 and serves until terminated. Every POST is answered with a
``text/event-stream`` reply of CHUNKS one-token text chunks, each SSE event
its own HTTP chunk (as a server that flushes every token sends them), built
once and written whole: ``/v1/messages`` in the Anthropic form, any other path
in the OpenAI chat completions form, ending with ``[DONE]``.

It runs in its own process so that only the client's CPU is counted, and
imports nothing of agentrt.
"""

from __future__ import annotations

import json
import socket
import sys
import threading


def _event(data: object, name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def openai_events(chunks: int) -> list[bytes]:
    """The SSE events of an OpenAI-compatible reply of `chunks` one-token chunks."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = [
        _event(
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {"content": f" w{n % 100}"}, "finish_reason": None}
                ],
            }
        )
        for n in range(chunks)
    ]
    events.append(_event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    events.append(b"data: [DONE]\n\n")
    return events


def anthropic_events(chunks: int) -> list[bytes]:
    """The SSE events of an Anthropic Messages reply of `chunks` one-token text deltas."""
    events = [
        _event(
            {
                "type": "message_start",
                "message": {"id": "msg_1", "role": "assistant", "usage": {"input_tokens": 1}},
            },
            "message_start",
        ),
        _event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
    ]
    events += [
        _event(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": f" w{n % 100}"},
            },
            "content_block_delta",
        )
        for n in range(chunks)
    ]
    events.append(_event({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    events.append(
        _event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": chunks},
            },
            "message_delta",
        )
    )
    events.append(_event({"type": "message_stop"}, "message_stop"))
    return events


def reply(events: list[bytes]) -> bytes:
    """The whole HTTP response: headers, then each event as its own chunk."""
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
    return head + body + b"0\r\n\r\n"


def _serve(conn: socket.socket, replies: dict[str, bytes]) -> None:
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            got = conn.recv(65536)
            if not got:
                return
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split()[1]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        while len(body) < length:
            got = conn.recv(65536)
            if not got:
                return
            body += got
        try:
            conn.sendall(replies["anthropic" if path.endswith("/messages") else "openai"])
        except OSError:
            return


def main(chunks: int) -> None:
    """Serve until terminated, one thread per connection."""
    replies = {
        "openai": reply(openai_events(chunks)),
        "anthropic": reply(anthropic_events(chunks)),
    }
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, replies), daemon=True).start()


if __name__ == "__main__":
    main(int(sys.argv[1]))

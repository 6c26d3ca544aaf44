"""How fast a cancel reaches the server: model providers against a bare socket.

A local HTTP/1.1 server on loopback streams the first piece of a reply and
then holds the connection. The client cancels as soon as it has seen that
piece; the figure is the median time from the cancel to the server reading
EOF on its socket. The baseline is the same server and the same cancel with a
bare `trio.SocketStream` closed by its `async with` block, the least any
client can do. Printed as a ratio to that baseline, measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_providers.py``
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Awaitable
from collections.abc import Callable

import trio

from agentrt.models.messages import Message
from agentrt.models.messages import ModelDelta
from agentrt.models.providers import AnthropicModel
from agentrt.models.providers import OpenAIModel

ROUNDS = 40

_OPENAI_FIRST = (
    b"data: "
    + json.dumps(
        {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
    ).encode()
    + b"\n\n"
)
_ANTHROPIC_FIRST = (
    b'event: message_start\ndata: {"type": "message_start", "message": {"usage": {"input_tokens": 1}}}\n\n'
    b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0,'
    b' "content_block": {"type": "text", "text": ""}}\n\n'
    b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0,'
    b' "delta": {"type": "text_delta", "text": "hi"}}\n\n'
)


class _Server:
    """Answers every request with headers and one chunk, then waits for the client to leave."""

    def __init__(self) -> None:
        self.port = 0
        self.first: bytes = b""
        self.closed_at: list[float] = []
        self.closed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._serve, listeners)

    async def _serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head = (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            body = b"%x\r\n%s\r\n" % (len(self.first), self.first)
            try:
                await stream.send_all(head + body)
                # Whatever the client sends after the headers (a request body) is drained here too.
                while await stream.receive_some(65536):
                    pass
            except trio.BrokenResourceError:
                pass
            self.closed_at.append(time.perf_counter())
            self.closed.set()


async def _measure(
    server: _Server, first: bytes, client: Callable[[trio.Event], Awaitable[None]]
) -> float:
    """Median seconds from cancel to the server seeing EOF, over `ROUNDS` runs."""
    server.first = first
    samples: list[float] = []
    for _ in range(ROUNDS):
        server.closed = trio.Event()
        seen = trio.Event()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def run(scope: trio.CancelScope = scope, seen: trio.Event = seen) -> None:
                    with scope:
                        await client(seen)

                nursery.start_soon(run)
                await seen.wait()
                cancelled_at = time.perf_counter()
                scope.cancel()
                await server.closed.wait()
        samples.append(server.closed_at[-1] - cancelled_at)
    return statistics.median(samples)


async def _bench() -> list[tuple[str, float, float, str]]:
    server = _Server()
    results: list[tuple[str, float, float, str]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        base_url = f"http://127.0.0.1:{server.port}"

        async def bare(seen: trio.Event) -> None:
            async with await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
                await stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n")
                await stream.receive_some(65536)
                seen.set()
                await trio.sleep_forever()

        def via(model: OpenAIModel | AnthropicModel) -> Callable[[trio.Event], Awaitable[None]]:
            async def client(seen: trio.Event) -> None:
                async def on_delta(delta: ModelDelta) -> None:
                    seen.set()

                await model.complete([Message.user("hi")], [], on_delta)

            return client

        baseline = await _measure(server, _OPENAI_FIRST, bare)
        openai = await _measure(server, _OPENAI_FIRST, via(OpenAIModel("m", base_url + "/v1")))
        anthropic = await _measure(
            server, _ANTHROPIC_FIRST, via(AnthropicModel("m", base_url, api_key="k"))
        )
        results.append(("providers.cancel_to_close.openai", openai, baseline, "s"))
        results.append(("providers.cancel_to_close.anthropic", anthropic, baseline, "s"))
        nursery.cancel_scope.cancel()
    return results


def bench() -> list[tuple[str, float, float, str]]:
    """(name, median, baseline median, unit) for each provider's cancel-to-close time."""
    return trio.run(_bench)


def main() -> None:
    """Print each figure with its baseline and the ratio."""
    for name, value, baseline, _unit in bench():
        print(
            f"{name}: median {value * 1e6:.0f} us from cancel to server-side close,"
            f" bare trio socket {baseline * 1e6:.0f} us, ratio {value / baseline:.2f}x"
            f" ({ROUNDS} rounds)"
        )


if __name__ == "__main__":
    main()

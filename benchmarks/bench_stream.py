"""What a streamed reply costs in CPU: agentrt's model stream against a bare httpx client.

``benchmarks/sse_server.py`` runs in its own process and answers every POST with
the same reply of `CHUNKS` one-token chunks (each SSE event its own HTTP chunk).
This process reads it both ways, ABBA-interleaved, and counts its own CPU time
(`time.process_time`, every thread of this process, none of the server's):

- the subject is what a run costs while the reply streams: `Executor.run` of
  a one-word prompt with the provider pointed at the local server, so the
  provider's SSE decoding and reading and the run's callback for each delta
  (redaction against two stored secrets across deltas, the text event, its subscriber) are
  all in it, and the run's own start and end (creating the task, committing
  the answer) too;
- the baseline is the least a Python client does with the same stream: a fresh
  `httpx.AsyncClient` posting the same body, `Response.aiter_lines`, one
  `json.loads` per ``data:`` line, the text of each delta appended to a list.

Rows: ``stream_cpu`` (the OpenAI-compatible provider) and ``stream_cpu_anthropic``
(the Anthropic one), each in CPU seconds per 1,000 chunks.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import trio

from agentrt.config.secrets import SecretStore
from agentrt.core.runtime import open_runtime
from agentrt.models.anthropic import AnthropicModel
from agentrt.models.openai import OpenAIModel
from agentrt.vocab.events import Event
from agentrt.vocab.events import Outcome
from agentrt.vocab.events import TextEvent

from ._harness import Result
from ._harness import interleave

#: One-token chunks in each streamed reply.
CHUNKS = 20_000
#: The text they add up to (as `sse_server.py` makes it).
REPLY = "".join(f" w{n % 100}" for n in range(CHUNKS))

SSE_SERVER = Path(__file__).with_name("sse_server.py")

#: The TLS settings of the bare client, made once as agentrt makes its own (unused on http://).
_TLS = httpx.create_ssl_context()


def start_server() -> tuple[subprocess.Popen[bytes], int]:
    """The SSE server as a child process, and its port."""
    process = subprocess.Popen(
        [sys.executable, str(SSE_SERVER), str(CHUNKS)], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, port


async def _bare(url: str, headers: dict[str, str], body: dict[str, Any], anthropic: bool) -> int:
    """Read the stream the least a Python client does; the number of text pieces seen."""
    texts: list[str] = []
    async with (
        httpx.AsyncClient(verify=_TLS) as client,
        client.stream("POST", url, headers=headers, json=body) as response,
    ):
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if anthropic:
                if data["type"] == "content_block_delta":
                    texts.append(data["delta"]["text"])
            elif data["choices"]:
                piece = data["choices"][0]["delta"].get("content")
                if piece:
                    texts.append(piece)
    return len(texts)


async def _bench_provider(
    state_dir: Path, name: str, port: int, anthropic: bool, rounds: int
) -> Result:
    base = f"http://127.0.0.1:{port}"
    model: OpenAIModel | AnthropicModel
    if anthropic:
        model = AnthropicModel("m", base, api_key="sk-ant-bench-key-0123456789")
        url = base + "/v1/messages"
        headers = {"x-api-key": "sk-ant-bench-key-0123456789", "anthropic-version": "2023-06-01"}
        body: dict[str, Any] = {
            "model": "m",
            "max_tokens": 4096,
            "stream": True,
            "messages": [{"role": "user", "content": "hello"}],
        }
    else:
        model = OpenAIModel("m", base + "/v1")
        url = base + "/v1/chat/completions"
        headers = {"accept": "text/event-stream"}
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "stream": True}
    # Stored secrets as a user has them, so the redactor has something to look for.
    secrets = SecretStore(state_dir / "secrets")
    secrets.put("github-token", "ghp_benchSecretValue0123456789abcdef")
    secrets.put("db-password", "correct horse battery staple 42")
    problems: list[str] = []
    counter = itertools.count()
    owner = object()
    async with open_runtime(state_dir, model=model, workdir=state_dir, restricted_paths=()) as rt:
        texts: list[str] = []
        events: list[int] = []

        async def emit(event: Event) -> None:
            if isinstance(event, TextEvent):
                texts.append(event.text)

        async def subject() -> float:
            texts.clear()
            session = f"chat-stream-{next(counter)}"
            start = time.process_time()
            ended = await rt.executor.run(session, "hello", owner=owner, emit=emit)
            cpu = time.process_time() - start
            events.append(len(texts))
            if ended.outcome is not Outcome.FINISHED:
                problems.append(f"{session} ended {ended.outcome.value}: {ended.error}")
            elif "".join(texts) != REPLY:
                problems.append(f"{session} streamed other text than the server sent")
            await rt.executor.discard(session)
            return cpu / (CHUNKS / 1000)

        async def baseline() -> float:
            start = time.process_time()
            seen = await _bare(url, headers, body, anthropic)
            cpu = time.process_time() - start
            if seen != CHUNKS:
                problems.append(f"the bare client saw {seen} pieces, not {CHUNKS}")
            return cpu / (CHUNKS / 1000)

        subject_median, baseline_median = await interleave(subject, baseline, rounds)
    return Result(
        name,
        subject_median,
        baseline_median,
        "ratio",
        1.5,
        rounds,
        tuple(problems[:3]),
        (
            f"CPU per 1,000 chunks of a {CHUNKS:,}-chunk reply from a local server:"
            f" Executor.run through {type(model).__name__} vs a bare httpx client"
            " (aiter_lines + json.loads)",
            f"text events a run emitted: median {statistics.median(events):.0f} for {CHUNKS:,}"
            " chunks, their text checked against the server's",
        ),
    )


async def run_all(root: Path, rounds: int = 10) -> list[Result]:
    """Both rows, on one server process."""
    process, port = start_server()
    try:
        results = []
        for name, anthropic in (("stream_cpu", False), ("stream_cpu_anthropic", True)):
            folder = root / name
            folder.mkdir()
            results.append(await _bench_provider(folder, name, port, anthropic, rounds))
        return results
    finally:
        process.terminate()
        process.wait()


def main(argv: list[str] | None = None) -> None:
    """Run the rows alone: ``python -m benchmarks.bench_stream``."""
    import tempfile

    from ._harness import format_table

    with tempfile.TemporaryDirectory(prefix="agentrt-stream-") as tmp:
        print(format_table(trio.run(run_all, Path(tmp))))


if __name__ == "__main__":
    main()

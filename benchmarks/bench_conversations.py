"""Long conversations and tracing: what a long, compacted history and OpenTelemetry cost.

=================  ===================================================  ======
benchmark          subject vs baseline                                  target
=================  ===================================================  ======
``history_10000``  building one round's request (the compaction check   <= 1.5x
                   and the prompt) in a session of 10,000 messages,
                   compacted, vs in one of 10
``otel_overhead``  a run (a model answer, a tool call, a second         <= 1.2x
                   answer) with OpenTelemetry spans recorded and
                   batched vs with tracing off
=================  ===================================================  ======
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from agentrt.agent.compaction import ContextLimits
from agentrt.agent.compaction import estimate
from agentrt.agent.loop import AgentRun
from agentrt.core import tracing
from agentrt.models.messages import Compaction
from agentrt.models.messages import Message
from agentrt.models.messages import Role
from agentrt.store.record import TaskRecord
from agentrt.vocab.events import Event
from agentrt.vocab.events import Outcome

from ._harness import Result
from ._harness import interleave
from ._workload import conversation
from .bench_core import open_bench_runtime

#: The window of the model in `bench_request_building`: the prompts of both sizes fit.
WINDOW = 16_000


async def _ignore(event: Event) -> None:
    await trio.lowlevel.checkpoint()


def _compacted(count: int) -> tuple[Message, ...]:
    """`count` messages whose last compaction keeps the 10 before it whole."""
    past = conversation(count - 1, "long")
    entry = Message(
        Role.NOTE,
        "agentrt: the earlier messages, summarised: the notes were read, one by one.",
        compaction=Compaction(count - 11, 10),
    )
    return (*past, entry)


async def bench_request_building(
    state_dir: Path, rounds: int = 30, batch: int = 200, history: int = 10_000
) -> Result:
    """`AgentRun.compact` (no compaction due) and `AgentRun._model_messages`, as a round
    runs them before its request, with `history` messages of history (compacted) vs 10."""
    runtime, close = await open_bench_runtime(state_dir)
    problems: list[str] = []
    config = attrs.evolve(
        runtime.executor.config, context=ContextLimits({runtime.model.name: WINDOW})
    )
    ask = (Message.user("and now, the last note?"),)

    def agent(past: Sequence[Message]) -> AgentRun:
        return AgentRun(
            model=runtime.model,
            registry=runtime.registry,
            config=config,
            emit=_ignore,
            task_hash="bench",
            snapshot=TaskRecord("chat-bench", ask[0].content, ask),
            store=None,
            history=tuple(past),
        )

    long_run = agent(_compacted(history))
    short_run = agent(conversation(10, "short"))
    sizes = {
        "long": len(long_run._model_messages()),
        "short": len(short_run._model_messages()),
    }

    def timed(run: AgentRun) -> Any:
        async def batch_of() -> float:
            start = time.perf_counter()
            for _ in range(batch):
                if await run.compact() is not None:
                    problems.append("a compaction was made: none is due")
                run._model_messages()
            return (time.perf_counter() - start) / batch

        return batch_of

    try:
        subject, baseline = await interleave(timed(long_run), timed(short_run), rounds)
    finally:
        await close()
    prompt = long_run._model_messages()
    # The run's system prompt, the summary, the 10 messages it kept whole and the question.
    if prompt[0].role is not Role.SYSTEM or prompt[1].content != _compacted(history)[-1].content:
        problems.append("the long session's prompt does not start with its system prompt")
    if len(prompt) != 13:
        problems.append(f"the long session's prompt is {len(prompt)} messages, not 13")
    if estimate(prompt) > WINDOW:
        problems.append("the long session's prompt passes the window")
    return Result(
        f"history_{history}",
        subject,
        baseline,
        "ratio",
        1.5,
        rounds,
        tuple(problems[:3]),
        (
            f"a round's compaction check and prompt: {history} messages of history, compacted "
            f"(a prompt of {sizes['long']} messages), vs 10 (a prompt of {sizes['short']}); "
            f"{batch} a sample",
        ),
    )


async def bench_otel_overhead(state_dir: Path, rounds: int = 30) -> Result:
    """`Executor.run` of a round with a tool call, spans recorded vs tracing off."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export import SpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult
    except ImportError:
        return Result.failed("otel_overhead", "needs agentrt[otel]", 0.0, 1.2, rounds)

    exported: list[int] = []

    class Counting(SpanExporter):
        """Counts the spans handed over (an exporter sending nowhere)."""

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            exported.append(len(spans))
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Counting()))
    runtime, close = await open_bench_runtime(state_dir)
    (state_dir / "a.txt").write_text("a note")
    counter = itertools.count()
    problems: list[str] = []

    async def run(traced: bool) -> float:
        tracing.install(provider if traced else None)
        session = f"cli-otel-{next(counter)}"
        start = time.perf_counter()
        ended = await runtime.executor.run(session, "read a.txt", owner="bench", emit=_ignore)
        elapsed = time.perf_counter() - start
        tracing.install(None)
        if ended.outcome is not Outcome.FINISHED:
            problems.append(f"{session} ended {ended.outcome.value}: {ended.error}")
        return elapsed

    try:
        subject, baseline = await interleave(lambda: run(True), lambda: run(False), rounds)
    finally:
        tracing.install(None)
        await close()
        provider.shutdown()
    spans = sum(exported)
    runs = rounds + 1
    if spans < runs * 5:
        problems.append(f"{spans} spans for {runs} traced runs: fewer than 5 a run")
    return Result(
        "otel_overhead",
        subject,
        baseline,
        "ratio",
        1.2,
        rounds,
        tuple(problems[:3]),
        (
            f"Executor.run('read a.txt') with spans batched to an exporter that counts them "
            f"({spans // max(runs, 1)} a run) vs tracing off",
        ),
    )


async def run_all(root: Path) -> list[Result]:
    """Both benchmarks, in one Trio run."""
    (root / "history").mkdir()
    (root / "otel").mkdir()
    return [
        await bench_request_building(root / "history"),
        await bench_otel_overhead(root / "otel"),
    ]

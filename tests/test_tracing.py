"""OpenTelemetry spans: off and not imported by default; with an in-memory exporter and with
a local OTLP/HTTP receiver, the run, round, model request, tool call and question spans
carry the session, task hash, attempt, tokens and the cause of a Pause."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from agentrt import Cause
from agentrt import Outcome
from agentrt import Runtime
from agentrt import TaskStarted
from agentrt import ToolResultEvent
from agentrt.core import tracing

from .conftest import FakeVerifier
from .conftest import Recorder
from .conftest import scripted_runtime

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.install(provider)
    yield spans
    tracing.install(None)


def test_without_an_endpoint_no_opentelemetry_module_is_imported(tmp_path: Path) -> None:
    script = (
        "import sys, trio\n"
        "from agentrt import open_runtime\n"
        "from agentrt.models.scripted import ScriptedModel\n"
        "async def main():\n"
        f"    async with open_runtime({str(tmp_path / 'state')!r}, model=ScriptedModel("
        f"word_delay=0), workdir={str(tmp_path)!r}, restricted_paths=[]) as rt:\n"
        "        class R:\n"
        "            async def __call__(self, e): pass\n"
        "        ended = await rt.executor.run('cli-t', 'read nothing.txt', owner=1, emit=R())\n"
        "        print(ended.outcome.value)\n"
        "trio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["finished", "[]"]


async def paused_at_its_question(rt: Runtime) -> tuple[str, str]:
    """Run a tool call and a question; the question's listener pauses the run."""
    recorder = Recorder()
    read = trio.Event()
    recorder.hooks.append(lambda event: read.set() if isinstance(event, ToolResultEvent) else None)
    owner = object()
    async with trio.open_nursery() as nursery:

        async def listen(task_status: trio.TaskStatus[None]) -> None:
            with rt.registry.listen("cli-") as listener:
                task_status.started()
                await listener.claim()
                await read.wait()  # the file was read: the pause stops the question alone
                [started] = recorder.of(TaskStarted)
                rt.executor.cancel(started.task_hash, Cause.PAUSE, owner=owner)

        await nursery.start(listen)
        with trio.fail_after(10):
            end = await rt.executor.run(
                "cli-tr", "read a.txt; ask Colour?", owner=owner, emit=recorder
            )
    assert (end.outcome, end.cause) == (Outcome.CANCELLED, Cause.PAUSE)
    return "cli-tr", end.task_hash


def by_name(spans: Any) -> dict[str, dict[str, Any]]:
    return {s.name: dict(s.attributes or {}) for s in spans}


async def test_spans_of_a_paused_run_in_an_in_memory_exporter(
    exporter: InMemorySpanExporter, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    (workdir / "a.txt").write_text("teal")
    async with scripted_runtime(tmp_path / "state", workdir, verifier=verifier) as rt:
        session, task = await paused_at_its_question(rt)
    spans = exporter.get_finished_spans()
    named = by_name(spans)
    run = named["invoke_agent agentrt"]
    assert run["gen_ai.operation.name"] == "invoke_agent"
    assert (run["agentrt.session.id"], run["agentrt.task.hash"]) == (session, task)
    assert run["agentrt.stop.cause"] == "pause"
    chat = named["chat scripted"]
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.request.model"] == "scripted"
    assert chat["gen_ai.usage.input_tokens"] > 0
    assert chat["gen_ai.usage.output_tokens"] >= 0
    tool = named["execute_tool read_file"]
    assert (tool["gen_ai.tool.name"], tool["agentrt.attempt"]) == ("read_file", 1)
    assert tool["agentrt.task.hash"] == task
    assert "agentrt.stop.cause" not in tool  # it ended before the pause
    question = named["agentrt.question"]
    assert question["agentrt.question.kind"] == "question"
    assert question["agentrt.stop.cause"] == "pause"
    rounds = [dict(s.attributes or {}) for s in spans if s.name == "agentrt.round"]
    assert {r["agentrt.round.phase"] for r in rounds} == {"model", "tools"}
    # Every span is the run's, or under it.
    [root] = [s for s in spans if s.name == "invoke_agent agentrt"]
    assert root.context is not None
    assert {s.context.trace_id for s in spans if s.context is not None} == {root.context.trace_id}


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        _Receiver.bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_spans_reach_a_local_otlp_http_receiver(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Receiver.bodies = []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setattr(tracing, "_looked", False)
    (workdir / "a.txt").write_text("teal")
    try:
        async with scripted_runtime(tmp_path / "state", workdir, verifier=verifier) as rt:
            _, task = await paused_at_its_question(rt)
        await trio.to_thread.run_sync(tracing.flush)
    finally:
        tracing.install(None)
        server.shutdown()
    spans = []
    for body in _Receiver.bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                spans += list(scope.spans)

    def attributes(span: Any) -> dict[str, Any]:
        out = {}
        for kv in span.attributes:
            value = kv.value
            out[kv.key] = getattr(value, value.WhichOneof("value"))
        return out

    named = {s.name: attributes(s) for s in spans}
    assert named["invoke_agent agentrt"]["agentrt.task.hash"] == task
    assert named["invoke_agent agentrt"]["agentrt.stop.cause"] == "pause"
    assert named["agentrt.question"]["agentrt.stop.cause"] == "pause"
    assert named["chat scripted"]["gen_ai.usage.input_tokens"] > 0
    assert named["execute_tool read_file"]["agentrt.attempt"] == 1

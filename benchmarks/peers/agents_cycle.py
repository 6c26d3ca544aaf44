"""The OpenAI Agents SDK's approval cycle: a tool call that needs approval interrupts the run,
its ``RunState`` is persisted, then loaded, approved and resumed.

The model is local: `ScriptedModel` implements the SDK's ``Model`` interface
and answers from a script, so nothing goes over the network. It mirrors
agentrt's benchmark task: the first response asks for ``fetch`` (a 2,048-byte
result, no approval) and ``deploy`` (needs approval); every later response
asks for ``deploy`` again, so every resumed run stops at the next approval.

The SDK leaves storage to the application; here a ``RunState`` string goes
into a SQLite file set up like agentrt's store (WAL, synchronous=FULL). One
cycle resumes the state saved at the first interruption, so each cycle does
the same work on a state of the same size: select it, ``RunState.from_string``,
approve, ``Runner.run`` (the tool runs, the model answers, the run stops at
the next approval), ``to_state().to_string()``, upsert it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent
from agents import Runner
from agents import RunState
from agents import function_tool
from agents import set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall

from ..bench_core import connect_like_store

#: The size of the fetched result, as agentrt's task keeps its `big` result.
RESULT_BYTES = 2048


@function_tool
def fetch(path: str) -> str:
    """Read a file."""
    return "x" * RESULT_BYTES


@function_tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy to a target; a person must approve each call."""
    return f"deployed to {target}"


def _call(name: str, call_id: str, arguments: dict[str, str]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        status="completed",
    )


class ScriptedModel(Model):
    """A local model: ``fetch`` and ``deploy`` first, then ``deploy`` again, every time."""

    def __init__(self) -> None:
        self.calls = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        """The next scripted response; no network."""
        self.calls += 1
        items = input if isinstance(input, list) else []
        started = any(_item_type(item) == "function_call" for item in items)
        output = [] if started else [_call("fetch", f"fetch_{self.calls}", {"path": "notes.md"})]
        output.append(_call("deploy", f"deploy_{self.calls}", {"target": "prod"}))
        await asyncio.sleep(0)
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Not used: the benchmark runs without streaming."""
        raise NotImplementedError("the scripted model does not stream")


def _item_type(item: Any) -> Any:
    return item.get("type") if isinstance(item, dict) else getattr(item, "type", None)


class AgentsCycle:
    """A run stopped at a tool approval, its `RunState` kept in SQLite, resumed cycle after cycle."""

    def __init__(self, path: Path) -> None:
        set_tracing_disabled(True)
        self.model = ScriptedModel()
        self.agent: Agent[Any] = Agent(
            name="ops",
            instructions="Deploy what you are asked to.",
            model=self.model,
            tools=[fetch, deploy],
        )
        self.db: sqlite3.Connection = connect_like_store(path, check_same_thread=False)
        self.cycles = 0
        self.state_bytes = 0
        self.problems: list[str] = []
        asyncio.run(self._first())

    async def _first(self) -> None:
        result = await Runner.run(self.agent, "deploy the release to prod")
        if not result.interruptions:
            self.problems.append("the first run did not stop for an approval")
        saved = result.to_state().to_string()
        self.state_bytes = len(saved.encode())
        with self.db:
            self.db.execute("INSERT INTO tasks(session_id, record) VALUES ('paused', ?)", (saved,))

    async def _cycle(self) -> float:
        start = time.perf_counter()
        text = self.db.execute("SELECT record FROM tasks WHERE session_id = 'paused'").fetchone()[0]
        state = await RunState.from_string(self.agent, text)
        for item in state.get_interruptions():
            state.approve(item)
        result = await Runner.run(self.agent, state)
        saved = result.to_state().to_string()
        with self.db:
            self.db.execute(
                "INSERT INTO tasks(session_id, record) VALUES ('latest', ?) "
                "ON CONFLICT(session_id) DO UPDATE SET record = excluded.record",
                (saved,),
            )
        elapsed = time.perf_counter() - start
        self.cycles += 1
        names = [getattr(item, "tool_name", None) for item in result.interruptions]
        if names != ["deploy"]:
            self.problems.append(f"cycle {self.cycles} stopped for {names}, not one deploy")
        return elapsed

    async def _batch(self, size: int) -> list[float]:
        return [await self._cycle() for _ in range(size)]

    def batch(self, size: int) -> list[float]:
        """`size` cycles on a fresh asyncio loop; the seconds of each."""
        return asyncio.run(self._batch(size))

    def close(self) -> None:
        """Close the SQLite file."""
        self.db.close()

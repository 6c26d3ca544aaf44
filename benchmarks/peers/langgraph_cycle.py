"""LangGraph's human-in-the-loop cycle: ``interrupt()`` persisted by ``SqliteSaver``, then
``Command(resume=...)``.

The graph mirrors agentrt's benchmark task: a ``fetch`` node puts a 2,048-byte
result into the state (agentrt's committed ``big`` call), then a ``deploy``
node asks for approval with ``interrupt()`` (agentrt's run waiting in a call)
and loops back to itself, so every resume runs to the next interrupt. One
cycle is one ``graph.invoke(Command(resume="allow"), config)``: load the
checkpoint, resume the node, save the checkpoints, stop at the next interrupt.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START
from langgraph.graph import StateGraph
from langgraph.types import Command
from langgraph.types import interrupt

#: The size of the fetched result kept in the state, as agentrt's task keeps its `big` result.
RESULT_BYTES = 2048


class _State(TypedDict):
    fetched: str
    approvals: int


def _fetch(state: _State) -> dict[str, Any]:
    return {"fetched": "x" * RESULT_BYTES}


def _deploy(state: _State) -> dict[str, Any]:
    answer = interrupt({"tool": "deploy", "question": "Deploy to prod?"})
    return {"approvals": state["approvals"] + (1 if answer == "allow" else 0)}


class LangGraphCycle:
    """A graph paused at its ``interrupt()``, checkpointed in SQLite, resumed cycle after cycle.

    `synchronous` sets ``PRAGMA synchronous`` on the checkpointer's connection;
    None keeps what ``SqliteSaver`` sets up itself.
    """

    def __init__(self, path: Path, synchronous: str | None = None) -> None:
        self.connection = sqlite3.connect(path, check_same_thread=False)
        self.saver = SqliteSaver(self.connection)
        self.saver.setup()
        if synchronous is not None:
            self.connection.execute(f"PRAGMA synchronous={synchronous}")
        graph = StateGraph(_State)
        graph.add_node("fetch", _fetch)
        graph.add_node("deploy", _deploy)
        graph.add_edge(START, "fetch")
        graph.add_edge("fetch", "deploy")
        graph.add_edge("deploy", "deploy")
        self.graph = graph.compile(checkpointer=self.saver)
        self.config: Any = {"configurable": {"thread_id": "bench"}}
        self.cycles = 0
        self.problems: list[str] = []
        first = self.graph.invoke({"fetched": "", "approvals": 0}, self.config)
        if "__interrupt__" not in first:
            self.problems.append(f"the graph did not stop at its interrupt: {sorted(first)}")

    def cycle(self) -> float:
        """Resume the graph with an approval until it interrupts again; seconds."""
        start = time.perf_counter()
        out = self.graph.invoke(Command(resume="allow"), self.config)
        elapsed = time.perf_counter() - start
        self.cycles += 1
        if "__interrupt__" not in out or out["approvals"] != self.cycles:
            self.problems.append(f"cycle {self.cycles} ended with {sorted(out)}")
        return elapsed

    def batch(self, size: int) -> list[float]:
        """`size` cycles; the seconds of each."""
        return [self.cycle() for _ in range(size)]

    def settings(self) -> str:
        """The checkpointer's journal mode and synchronous setting, for the notes."""
        mode = self.connection.execute("PRAGMA journal_mode").fetchone()[0]
        level = self.connection.execute("PRAGMA synchronous").fetchone()[0]
        names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        return f"journal_mode={mode}, synchronous={names.get(level, level)}"

    def checkpoints(self) -> int:
        """How many checkpoints the saver holds (it keeps every one)."""
        return int(self.connection.execute("SELECT count(*) FROM checkpoints").fetchone()[0])

    def close(self) -> None:
        """Close the checkpointer's connection."""
        self.connection.close()

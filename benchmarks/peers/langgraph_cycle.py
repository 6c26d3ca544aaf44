"""LangGraph's human-in-the-loop cycle: ``interrupt()`` persisted by ``SqliteSaver`` (or
``PostgresSaver``), then ``Command(resume=...)``.

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

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
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
        saver = SqliteSaver(self.connection)
        saver.setup()
        if synchronous is not None:
            self.connection.execute(f"PRAGMA synchronous={synchronous}")
        self._start(saver)

    def _start(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver
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


class LangGraphPostgresCycle(LangGraphCycle):
    """The same graph checkpointed by ``PostgresSaver`` in the database at `url`.

    Its connection is made as LangGraph's documentation says (autocommit,
    rows as dicts, no server-side prepared statements); ``setup()`` makes its
    tables in the URL's schema.
    """

    def __init__(self, url: str) -> None:  # the SQLite connection is never made
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        self.pg: psycopg.Connection[Any] = psycopg.connect(
            url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        saver = PostgresSaver(self.pg)
        saver.setup()
        self._start(saver)

    def settings(self) -> str:
        row = self.pg.execute("SHOW synchronous_commit").fetchone()
        return f"synchronous_commit={row['synchronous_commit'] if row else '?'}"

    def checkpoints(self) -> int:
        row = self.pg.execute("SELECT count(*) AS n FROM checkpoints").fetchone()
        return int(row["n"]) if row else 0

    def close(self) -> None:
        self.pg.close()

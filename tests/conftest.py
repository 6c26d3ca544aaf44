"""Shared fixtures: a real runtime on a temporary SQLite store, and event recorders."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import attrs
import pytest
import trio

from agentrt import Event, Runtime, ScriptedModel, open_runtime
from agentrt._sudo import PrivilegedResult

E = TypeVar("E")


@attrs.define
class FakeVerifier:
    """Stands in for sudo: a known password, a switchable credential cache, logged commands."""

    password: str = "hunter2"
    is_cached: bool = False
    verified: list[bool] = attrs.field(factory=list)
    commands: list[list[str]] = attrs.field(factory=list)

    async def cached(self) -> bool:
        await trio.lowlevel.checkpoint()
        return self.is_cached

    async def verify(self, password: str) -> bool:
        await trio.lowlevel.checkpoint()
        ok = password == self.password
        self.verified.append(ok)
        if ok:
            self.is_cached = True
        return ok

    async def run(self, argv: Sequence[str], stdin: bytes | None = None) -> PrivilegedResult:
        await trio.lowlevel.checkpoint()
        self.commands.append(list(argv))
        if argv[0] == "tee":
            await trio.Path(argv[1]).write_bytes(stdin or b"")
            return PrivilegedResult(0, stdin or b"")
        if argv[0] == "cat":
            return PrivilegedResult(0, await trio.Path(argv[1]).read_bytes())
        return PrivilegedResult(0, b"ran\n")


@attrs.define
class Recorder:
    """An `emit` callback that records events and runs hooks as they arrive."""

    events: list[Event] = attrs.field(factory=list)
    hooks: list[Callable[[Event], Awaitable[None] | None]] = attrs.field(factory=list)

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        for hook in list(self.hooks):
            result = hook(event)
            if result is not None:
                await result

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def text(self) -> str:
        from agentrt import TextEvent

        return "".join(e.text for e in self.events if isinstance(e, TextEvent))


@pytest.fixture
def verifier() -> FakeVerifier:
    return FakeVerifier()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
async def runtime(tmp_path: Path, workdir: Path, verifier: FakeVerifier) -> AsyncIterator[Runtime]:
    async with open_runtime(
        tmp_path / "state",
        model=ScriptedModel(word_delay=0, stream_delay=0),
        workdir=workdir,
        restricted_paths=[tmp_path / "restricted"],
        verifier=verifier,
    ) as rt:
        yield rt


def insert_unreadable_record(db_path: Path, session_id: str) -> None:
    """Write a pending task whose transcript is not a list of messages, as a damaged file would."""
    db = sqlite3.connect(db_path)
    try:
        db.execute(
            "INSERT INTO tasks(session_id, status, runs, created_at, updated_at, input, transcript) "
            "VALUES (?, 'interrupted', 1, 0, 0, '\"x\"', ?)",
            (session_id, json.dumps({"not": "a list of messages"})),
        )
        db.commit()
    finally:
        db.close()

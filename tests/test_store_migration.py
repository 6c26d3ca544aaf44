"""A store written by schema version 1 opens, migrated, with every task intact."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from agentrt import TaskStatus, TaskStore
from agentrt._store import SCHEMA_VERSION

SCHEMA_V1 = """
CREATE TABLE tasks (
    session_id TEXT PRIMARY KEY, status TEXT NOT NULL, cause TEXT, error TEXT,
    question TEXT, window_hash TEXT, task_hash TEXT, runs INTEGER NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, input TEXT NOT NULL,
    runner TEXT, transcript TEXT NOT NULL
);
CREATE TABLE history (
    session_id TEXT PRIMARY KEY, updated_at REAL NOT NULL, transcript TEXT NOT NULL
);
PRAGMA user_version = 1;
"""


def write_v1_store(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_V1)
    transcript = [
        {"role": "user", "content": "sh echo hi", "tool_calls": []},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "echo hi"}}],
        },
    ]
    db.execute(
        "INSERT INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            "cli-old",
            "interrupted",
            "pause",
            "null",
            "null",
            "w1",
            "abc",
            1,
            1.0,
            2.0,
            json.dumps("sh echo hi"),
            "1:1",
            json.dumps(transcript),
        ),
    )
    db.execute(
        "INSERT INTO history VALUES (?,?,?)",
        ("cli-done", 3.0, json.dumps([{"role": "user", "content": "hello"}])),
    )
    db.commit()
    db.close()


async def test_a_version_1_store_is_migrated_on_open(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    write_v1_store(path)
    store = await TaskStore.open(path)
    try:
        record = await store.load("cli-old")
        assert record is not None
        assert record.status is TaskStatus.INTERRUPTED
        assert [c.id for c in record.unanswered_calls()] == ["c1"]
        assert record.attempts == {}
        assert record.workdir is None
        assert [m.content for m in await store.load_history("cli-done")] == ["hello"]
        assert await store.owner("cli-done") is None
        assert await store.owner("cli-old") == "w1"
        # Writes work on the migrated file too.
        await store.save(record.evolve(attempts={"c1": 1}, workdir="/tmp"))
        again = await store.load("cli-old")
        assert again is not None
        assert again.attempts == {"c1": 1}
        assert again.workdir == "/tmp"
    finally:
        await store.aclose()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()

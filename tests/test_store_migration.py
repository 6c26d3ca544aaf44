"""Stores written by earlier schema versions open, migrated, with every task intact."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agentrt import Message
from agentrt import StoreError
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt.models.messages import Role
from agentrt.store.sqlite import SCHEMA_VERSION
from agentrt.vocab.usage import TokenCount

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


#: The columns of version 8's index of tasks by time: a listing's order, then what it reads.
TASKS_BY_TIME = ["updated_at", "session_id", "status", "line"]


def index_columns(db: sqlite3.Connection, index: str) -> list[str]:
    return [row[2] for row in db.execute(f"PRAGMA index_info({index})")]


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
    assert index_columns(db, "tasks_by_time") == TASKS_BY_TIME
    db.close()


#: Schema version 2 as it was: each transcript one JSON column, finished runs in `history`.
SCHEMA_V2 = """
CREATE TABLE tasks (
    session_id TEXT PRIMARY KEY, status TEXT NOT NULL, cause TEXT, error TEXT,
    question TEXT, window_hash TEXT, task_hash TEXT, runs INTEGER NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, input TEXT NOT NULL,
    runner TEXT, attempts TEXT NOT NULL DEFAULT '{}', workdir TEXT,
    lost_words INTEGER NOT NULL DEFAULT 0, transcript TEXT NOT NULL
);
CREATE TABLE history (
    session_id TEXT PRIMARY KEY, updated_at REAL NOT NULL, transcript TEXT NOT NULL,
    window_hash TEXT
);
PRAGMA user_version = 2;
"""


def write_v2_store(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_V2)
    earlier = [
        {"role": "user", "content": "first question\nwith a second line"},
        {"role": "assistant", "content": "first answer", "tool_calls": []},
    ]
    db.execute("INSERT INTO history VALUES (?,?,?,?)", ("cli-both", 5.0, json.dumps(earlier), "w2"))
    transcript = [
        {"role": "user", "content": "read a.txt"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}},
                {"id": "c2", "name": "ask_user", "arguments": {"question": "Which?"}},
            ],
        },
        {"role": "tool", "content": "contents", "tool_call_id": "c1", "name": "read_file"},
    ]
    question = {"call_id": "c2", "prompt": "Which?", "kind": "question"}
    db.execute(
        "INSERT INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            "cli-both",
            "awaiting_answer",
            None,
            "null",
            json.dumps(question),
            "w2",
            "h1",
            2,
            6.0,
            7.0,
            json.dumps("read a.txt"),
            "1:1",
            json.dumps({"c1": 1}),
            "/tmp",
            3,
            json.dumps(transcript),
        ),
    )
    db.execute(
        "INSERT INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            "chat-bad",
            "failed",
            None,
            "null",
            "null",
            None,
            None,
            1,
            1.0,
            1.0,
            '"x"',
            None,
            "{}",
            None,
            0,
            "{not json",
        ),
    )
    db.commit()
    db.close()


async def test_a_version_2_store_is_migrated_to_message_rows(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    write_v2_store(path)
    store = await TaskStore.open(path)
    try:
        record = await store.load("cli-both")
        assert record is not None
        assert record.status is TaskStatus.AWAITING_ANSWER
        assert record.question is not None and record.question.prompt == "Which?"
        assert [c.id for c in record.unanswered_calls()] == ["c2"]
        assert (record.attempts, record.workdir, record.lost_words) == ({"c1": 1}, "/tmp", 3)
        history = await store.load_history("cli-both")
        assert [m.content for m in history] == [
            "first question\nwith a second line",
            "first answer",
        ]
        # History first, then the task's transcript: one sequence of rows per session.
        page = await store.messages("cli-both")
        assert [m.seq for m in page.items] == [0, 1, 2, 3, 4]
        assert page.items[2].message.content == "read a.txt"
        sessions = {s.session_id: s for s in (await store.sessions()).items}
        assert sessions["cli-both"].title == "first question"
        assert sessions["cli-both"].messages == 5
        assert sessions["cli-both"].status == "awaiting_answer"
        assert await store.owner("cli-both") == "w2"
        # A damaged transcript stays damaged (and discardable), never silently dropped.
        listed = {t.session_id: t.status for t in await store.list_stored()}
        assert listed == {"cli-both": TaskStatus.AWAITING_ANSWER, "chat-bad": TaskStatus.FAILED}
        with pytest.raises(StoreError, match="agentrt pending discard chat-bad"):
            await store.load("chat-bad")
        assert await store.delete("chat-bad")
        # Answering appends one row after the task's three.
        answered = record.evolve(
            transcript=(*record.transcript, Message(Role.TOOL, "blue", tool_call_id="c2")),
            question=None,
        )
        await store.save(answered)
        assert [m.seq for m in (await store.messages("cli-both", after=4)).items] == [5]
    finally:
        await store.aclose()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"tasks", "sessions", "messages", "token_usage"}
    assert index_columns(db, "tasks_by_time") == TASKS_BY_TIME
    db.close()


async def test_a_new_store_is_made_at_version_8_with_the_token_usage_table(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    store = await TaskStore.open(path)
    await store.aclose()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"tasks", "sessions", "messages", "token_usage"}
    assert index_columns(db, "tasks_by_time") == TASKS_BY_TIME
    db.close()


@pytest.mark.parametrize(
    "old_index",
    ["CREATE INDEX tasks_by_time ON tasks(updated_at DESC, session_id)", None],
    ids=["version 7's index", "no index (dropped by hand)"],
)
async def test_a_version_7_store_gets_the_index_a_listing_reads_alone(
    tmp_path: Path, old_index: str | None
) -> None:
    path = tmp_path / "tasks.db"
    store = await TaskStore.open(path)
    try:
        for n in range(3):
            await store.save(TaskRecord(f"cli-{n}", f"task {n}", (), status=TaskStatus.INTERRUPTED))
        listed = await store.list_lines()
    finally:
        await store.aclose()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX tasks_by_time")
    if old_index is not None:
        db.execute(old_index)
    db.execute("PRAGMA user_version = 7")
    db.commit()
    db.close()
    store = await TaskStore.open(path)
    try:
        assert await store.list_lines() == listed
        assert len(listed) == 3
    finally:
        await store.aclose()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 8
    assert index_columns(db, "tasks_by_time") == TASKS_BY_TIME
    db.close()


async def test_a_version_6_store_keeps_its_models_and_gains_the_token_usage_table(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    store = await TaskStore.open(path)
    await store.finish("cli-old", [Message.user("hello"), Message.assistant("hi")])
    await store.set_session_model("cli-old", "openai:m1")
    await store.aclose()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE token_usage")
    db.execute("PRAGMA user_version = 6")
    db.commit()
    db.close()
    store = await TaskStore.open(path)
    try:
        assert await store.session_model("cli-old") == "openai:m1"
        assert [m.content for m in await store.load_history("cli-old")] == ["hello", "hi"]
        await store.add_usage("cli-old", "abc", "openai:m1", TokenCount(1, 10, 2))
        assert [r.tokens for r in await store.usage("cli-old")] == [TokenCount(1, 10, 2)]
    finally:
        await store.aclose()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 8
    assert index_columns(db, "tasks_by_time") == TASKS_BY_TIME
    db.close()

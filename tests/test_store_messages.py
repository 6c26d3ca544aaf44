"""The store's message rows: a commit appends, listings read summaries, pages cover everything."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from agentrt import Cause
from agentrt import Message
from agentrt import Outcome
from agentrt import PendingTaskExistsError
from agentrt import Runtime
from agentrt import SessionBusyError
from agentrt import StoreError
from agentrt import TaskInfo
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt import UnknownSessionError
from agentrt.models.messages import Role
from agentrt.store import BadCursorError
from agentrt.store import Store
from agentrt.store import TaskExistsError
from agentrt.store import UnreadableTask
from agentrt.store.record import TaskSummary
from agentrt.store.sql import page_query

from .conftest import Recorder
from .conftest import open_test_store
from .conftest import raw_sql


def _conversation(n: int) -> tuple[Message, ...]:
    return (Message.user("start"), *(Message.assistant(f"step {i}") for i in range(n - 1)))


def _count_row_changes(path: Path) -> sqlite3.Connection:
    """Triggers in the file that count what happens to message rows (read back with `_changes`)."""
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE IF NOT EXISTS row_changes (kind TEXT PRIMARY KEY, n INTEGER NOT NULL);
        INSERT OR IGNORE INTO row_changes VALUES ('insert', 0), ('update', 0), ('delete', 0);
        CREATE TRIGGER IF NOT EXISTS on_insert AFTER INSERT ON messages
            BEGIN UPDATE row_changes SET n = n + 1 WHERE kind = 'insert'; END;
        CREATE TRIGGER IF NOT EXISTS on_update AFTER UPDATE ON messages
            BEGIN UPDATE row_changes SET n = n + 1 WHERE kind = 'update'; END;
        CREATE TRIGGER IF NOT EXISTS on_delete AFTER DELETE ON messages
            BEGIN UPDATE row_changes SET n = n + 1 WHERE kind = 'delete'; END;
        """
    )
    return db


def _changes(db: sqlite3.Connection) -> dict[str, int]:
    return {str(k): int(n) for k, n in db.execute("SELECT kind, n FROM row_changes")}


def _reset(db: sqlite3.Connection) -> None:
    db.execute("UPDATE row_changes SET n = 0")
    db.commit()


async def test_a_commit_at_a_thousand_messages_writes_one_row(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = await TaskStore.open(path)
    try:
        record = await store.save(TaskRecord("cli-long", "start", _conversation(1000)))
        counter = _count_row_changes(path)
        _reset(counter)
        grown = record.evolve(transcript=(*record.transcript, Message.assistant("one more")))
        saved = await store.save(grown)
        assert _changes(counter) == {"insert": 1, "update": 0, "delete": 0}
        assert len(saved.transcript) == 1001
        # A record that does not extend what is stored (here: one message replaced) is
        # written whole, and reads back as given.
        _reset(counter)
        edited = saved.evolve(transcript=(*saved.transcript[:-1], Message.assistant("other")))
        await store.save(edited)
        assert _changes(counter)["insert"] == 1001
        loaded = await store.load("cli-long")
        assert loaded is not None and loaded.transcript[-1].content == "other"
        assert len(loaded.transcript) == 1001
        counter.close()
    finally:
        await store.aclose()


async def test_a_long_message_is_clamped_once_when_committed(store: Store) -> None:
    record = await store.save(TaskRecord("cli-big", "x", (Message.user("x"),)))
    call = Message.assistant("", ())
    big = Message(Role.TOOL, "y" * 100_000, tool_call_id="c1", name="read_file")
    saved = await store.save(record.evolve(transcript=(*record.transcript, call, big)))
    assert len(saved.transcript[-1].content.encode()) < 40_000
    assert "bytes elided" in saved.transcript[-1].content
    loaded = await store.load("cli-big")
    assert loaded is not None and loaded.transcript == saved.transcript


async def test_another_process_writing_the_file_is_never_missed(
    store_location: str | Path,
) -> None:
    """What one store keeps in memory is checked against the database on every use."""
    one = await open_test_store(store_location)
    two = await open_test_store(store_location)
    try:
        first = await one.save(TaskRecord("cli-shared", "start", _conversation(3)))
        seen_by_two = await two.load("cli-shared")
        assert seen_by_two is not None
        await two.save(
            seen_by_two.evolve(transcript=(*seen_by_two.transcript, Message.assistant("two")))
        )
        # `one` last wrote three messages; the file now holds four.
        await one.save(first.evolve(transcript=(*first.transcript, Message.assistant("one"))))
        loaded = await two.load("cli-shared")
        assert loaded is not None
        assert [m.content for m in loaded.transcript][-1] == "one"
        assert len(loaded.transcript) == 4, "one's commit was written as a whole transcript"
        # The finished conversation written by one is the history two's next run reads.
        await one.finish("cli-shared", loaded.transcript)
        assert [m.content for m in await two.load_history("cli-shared")][-1] == "one"
    finally:
        await one.aclose()
        await two.aclose()


async def test_listing_pages_cover_every_task_once_in_order(store: Store) -> None:
    for n in range(25):
        await store.save(
            TaskRecord(f"cli-{n:02}", f"task {n}", _conversation(n + 1), updated_at=n // 3)
        )
    await store.save(TaskRecord("chat-x", "other", _conversation(1)))
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await store.list_page("cli-", limit=4, cursor=cursor)
        pages += 1
        seen += [t.session_id for t in page.items]
        if page.next is None:
            break
        cursor = page.next
    assert pages == 7
    whole = [t.session_id for t in await store.list_stored("cli-")]
    assert seen == whole and sorted(seen) == [f"cli-{n:02}" for n in range(25)]
    summaries = [t for t in await store.list_stored("cli-") if isinstance(t, TaskSummary)]
    assert {t.session_id: t.messages for t in summaries}["cli-07"] == 8
    with pytest.raises(BadCursorError, match="not a listing cursor"):
        await store.list_page("cli-", limit=4, cursor="nonsense")


#: Six tasks saved at times 0 to 5, most recent first, once `_damaged_times` gave three of
#: them times that are not numbers: SQLite sorts text after every number, bytes after text.
DAMAGED_ORDER = ["cli-0", "cli-2", "cli-4", "cli-5", "cli-3", "cli-1"]


async def _damaged_times(
    store: Store, table: str, listing: Callable[..., Awaitable[object]]
) -> bool:
    """Save six tasks and give three rows of `table` the times a damaged file may hold.

    SQLite keeps any type in any column: text or bytes there, and True. A store whose
    times are numbers only (PostgreSQL) holds no such row, so no page ends on one:
    `listing` must refuse a cursor that carries one, and False.
    """
    for n in range(6):
        await store.save(TaskRecord(f"cli-{n}", "x", (), TaskStatus.INTERRUPTED, updated_at=n))
    if not isinstance(store, TaskStore):
        with pytest.raises(BadCursorError, match="not a listing cursor"):
            await listing(limit=2, cursor="t736f6f6e:cli-2")
        return False
    for session, value in (("cli-2", "'soon'"), ("cli-4", "'later'"), ("cli-0", "x'00ff'")):
        raw_sql(store, f"UPDATE {table} SET updated_at = {value} WHERE session_id = '{session}'")
    return True


async def test_a_page_ending_on_a_row_whose_time_is_not_a_number_has_a_next_page(
    store: Store,
) -> None:
    if not await _damaged_times(store, "tasks", store.list_page):
        return
    order = DAMAGED_ORDER
    for limit in (1, 2, 3):
        seen: list[str] = []
        lines: list[str] = []
        cursor: str | None = None
        line_cursor: str | None = None
        while True:
            page = await store.list_page(limit=limit, cursor=cursor)
            line_page = await store.line_page(limit=limit, cursor=line_cursor)
            seen += [t.session_id for t in page.items]
            lines += [line.split()[0] for line, _ in line_page.items]
            assert line_page.next == page.next
            if page.next is None:
                break
            cursor = line_cursor = page.next
        assert seen == lines == order, limit
    for kept in ("cli-0", "cli-2", "cli-4"):
        assert isinstance(
            next(t for t in await store.list_stored() if t.session_id == kept), UnreadableTask
        )
    for cursor in ("t0:cli-2", "tff:cli-2", "tzz:cli-2", "b0:cli-0"):
        with pytest.raises(BadCursorError, match="not a listing cursor"):
            await store.list_page(limit=2, cursor=cursor)


async def test_a_session_whose_time_is_not_a_number_is_listed_and_pages_go_past_it(
    store: Store,
) -> None:
    if not await _damaged_times(store, "sessions", store.sessions):
        return
    raw_sql(store, "UPDATE sessions SET created_at = x'01' WHERE session_id = 'cli-2'")
    everything = (await store.sessions()).items
    by_id = {s.session_id: s for s in everything}
    assert (by_id["cli-2"].created_at, by_id["cli-2"].updated_at) == (0.0, 0.0)
    assert by_id["cli-0"].updated_at == 0.0 and by_id["cli-3"].updated_at > 0
    assert (await store.session("cli-4")) == by_id["cli-4"]
    order = DAMAGED_ORDER
    assert [s.session_id for s in everything] == order
    for limit in (1, 2, 3):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = await store.sessions(limit=limit, cursor=cursor)
            seen += [s.session_id for s in page.items]
            if page.next is None:
                break
            cursor = page.next
        assert seen == order, limit


def test_the_summary_of_a_record_keeps_every_field_it_has_and_counts_the_transcript() -> None:
    fields: dict[str, Any] = {
        "status": TaskStatus.INTERRUPTED,
        "cause": Cause.PAUSE,
        "error": "an error",
        "window_hash": "w1",
        "task_hash": "t1",
        "created_at": 1.5,
        "updated_at": 2.5,
        "runs": 3,
        "runner": "123:456",
        "workdir": "/work",
        "lost_words": 7,
    }
    record = TaskRecord("cli-sum", "the input", _conversation(3), attempts={"c1": 2}, **fields)
    summary = TaskSummary.of(record)
    assert summary == TaskSummary("cli-sum", "the input", 3, question=None, **fields)


async def test_a_listing_does_not_decode_transcripts(
    store: Store, store_location: str | Path
) -> None:
    """A damaged message hides nothing in a listing; loading that task says what is wrong."""
    await store.save(TaskRecord("cli-ok", "fine", _conversation(2)))
    raw_sql(store, "UPDATE messages SET body = '{broken' WHERE session_id = 'cli-ok' AND seq = 1")
    [listed] = await store.list_stored()
    assert isinstance(listed, TaskSummary) and listed.messages == 2
    other = await open_test_store(store_location)  # nothing of cli-ok in its memory
    try:
        with pytest.raises(StoreError, match="agentrt pending discard cli-ok"):
            await other.load("cli-ok")
        assert isinstance(await other.lookup("cli-ok"), UnreadableTask)
    finally:
        await other.aclose()


async def test_a_long_session_stays_in_memory_while_another_is_used(store: Store) -> None:
    """A session of 12,000 messages is read from memory again after another session's use:
    the same objects come back, none decoded anew from its rows."""
    await store.finish("cli-long", _conversation(12_000))
    first = await store.load_history("cli-long")
    await store.finish("cli-short", _conversation(3))
    assert len(await store.load_history("cli-short")) == 3
    again = await store.load_history("cli-long")
    assert len(again) == 12_000
    assert again[0] is first[0] and again[-1] is first[-1]


async def test_sessions_keep_finished_conversations_and_page_their_messages(
    any_runtime: Runtime,
) -> None:
    runtime = any_runtime
    for text in ("hello there", "and again"):
        ended = await runtime.executor.run("chat-talk", text, owner="o", emit=Recorder())
        assert ended.outcome is Outcome.FINISHED
    store = runtime.store
    [info] = (await store.sessions("chat-")).items
    assert (info.session_id, info.title, info.status) == ("chat-talk", "hello there", None)
    assert info.messages == 4
    first = await store.messages("chat-talk", limit=3)
    assert [m.message.role for m in first.items] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert first.next == "2"
    rest = await store.messages("chat-talk", after=int(first.next), limit=3)
    assert [m.seq for m in rest.items] == [3] and rest.next is None
    # A user-cancel throws the pending task away; the session keeps what it did and the
    # note that says how it ended, for the model of its next message.
    await store.save(TaskRecord("chat-talk", "third", (Message.user("third"),)))
    assert (await store.sessions("chat-")).items[0].status == TaskStatus.RUNNING.value
    assert await runtime.executor.discard("chat-talk")
    assert await store.load("chat-talk") is None
    history = await store.load_history("chat-talk")
    assert [m.content for m in history][2:5] == ["and again", "and again", "third"]
    assert history[-1].role is Role.NOTE
    assert history[-1].content.startswith("agentrt: This task was stopped by the user at ")
    assert "It stopped before you had replied." in history[-1].content
    assert (await store.sessions("chat-")).items[0].messages == 6
    assert await store.forget("chat-talk")
    assert (await store.sessions("chat-")).items == ()
    assert (await store.messages("chat-talk")).items == ()


async def test_a_listed_session_carries_its_pending_task_and_a_finished_one_none(
    runtime: Runtime,
) -> None:
    await runtime.executor.run("chat-done", "hello", owner="o", emit=Recorder())
    await runtime.executor.run("chat-parked", "ask Colour?", owner="o", emit=Recorder())
    by_id = {s.session_id: s for s in (await runtime.store.sessions("chat-")).items}
    assert by_id["chat-done"].task is None and by_id["chat-done"].status is None
    parked = by_id["chat-parked"].task
    assert isinstance(parked, TaskSummary)
    assert parked.status is TaskStatus.AWAITING_ANSWER
    assert parked.question is not None and parked.question.prompt == "Colour?"
    assert parked.messages == by_id["chat-parked"].messages == 2


async def test_forgetting_a_session_with_a_pending_task_is_refused_and_deletes_nothing(
    runtime: Runtime,
) -> None:
    store = runtime.store
    await runtime.executor.run("chat-f", "hello", owner="o", emit=Recorder())
    await runtime.executor.run("chat-f", "ask Colour?", owner="o", emit=Recorder())
    with pytest.raises(TaskExistsError, match="agentrt pending discard chat-f"):
        await store.forget("chat-f")
    with pytest.raises(PendingTaskExistsError, match="has a pending task"):
        await runtime.executor.forget("chat-f")
    assert (await store.session("chat-f")) is not None
    assert len((await store.messages("chat-f")).items) == 4
    assert await runtime.executor.discard("chat-f")
    await runtime.executor.forget("chat-f")
    assert await store.session("chat-f") is None
    assert (await store.messages("chat-f")).items == ()
    with pytest.raises(UnknownSessionError, match="no session chat-f"):
        await runtime.executor.forget("chat-f")


async def test_a_running_session_cannot_be_forgotten(runtime: Runtime) -> None:

    async with trio.open_nursery() as nursery:
        info: TaskInfo = await nursery.start(
            lambda task_status: runtime.executor.run(
                "chat-busy", "sleep 60", owner="o", emit=Recorder(), task_status=task_status
            )
        )
        with pytest.raises(SessionBusyError, match="chat-busy is running"):
            await runtime.executor.forget("chat-busy")
        runtime.executor.cancel(info.task_hash, Cause.USER_CANCEL)
    # The task went; the session keeps the stopped call, its result saying so, and the note.
    assert await runtime.store.load("chat-busy") is None
    history = await runtime.store.load_history("chat-busy")
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.NOTE]
    assert history[2].content.startswith("stopped by the user while running")
    await runtime.executor.forget("chat-busy")
    assert await runtime.store.session("chat-busy") is None


async def test_prune_deletes_old_finished_sessions_and_never_one_with_a_pending_task(
    runtime: Runtime,
) -> None:

    for session, text in (("cli-old", "hello"), ("cli-kept", "ask Colour?")):
        await runtime.executor.run(session, text, owner="o", emit=Recorder())
    store = runtime.store
    assert await store.prune(time.time() - 3600) == 0  # both are newer than that
    assert await store.prune(time.time() + 1) == 1  # both are older: only the finished one goes
    assert [s.session_id for s in (await store.sessions()).items] == ["cli-kept"]
    assert (await store.messages("cli-old")).items == ()
    assert await store.load_history("cli-old") == ()
    assert (await store.load("cli-kept")) is not None


async def test_the_commands_fast_listing_prints_what_the_daemons_listing_does(
    store: Store,
) -> None:
    from agentrt.apps.cli import _summary_row
    from agentrt.frontends.terminal.framing import pending_task
    from agentrt.present.listing import lines as listing_lines

    from .conftest import fill_mixed_store

    await fill_mixed_store(store)
    lines = await store.list_lines()
    assert len(lines) == 12
    assert lines == listing_lines(await store.list_brief())
    assert lines == listing_lines(
        [_summary_row(pending_task(t)) for t in await store.list_stored()]
    )


@given(st.text())
def test_a_stored_string_reads_back_the_same_with_or_without_the_parser(text: str) -> None:
    from agentrt.store.columns import dumps
    from agentrt.store.columns import json_text

    assert json_text(dumps(text)) == text


async def test_one_session_is_looked_up_by_its_exact_id(runtime: Runtime) -> None:
    await runtime.executor.run("cli-10", "hello", owner="o", emit=Recorder())
    assert await runtime.store.session("cli-1") is None
    found = await runtime.store.session("cli-10")
    assert found is not None and (found.session_id, found.messages) == ("cli-10", 2)
    assert await runtime.store.session("cli-1%") is None  # no pattern either


def test_a_page_deep_in_a_long_listing_costs_what_the_first_does(tmp_path: Path) -> None:
    """The cursor's bound lets SQLite seek in the index: no page rescans the ones before it."""
    db = sqlite3.connect(tmp_path / "pages.db")
    db.execute("CREATE TABLE tasks (session_id TEXT PRIMARY KEY, updated_at REAL NOT NULL)")
    db.execute("CREATE INDEX tasks_by_time ON tasks(updated_at DESC, session_id)")
    db.executemany(
        "INSERT INTO tasks VALUES (?, ?)", [(f"cli-{n:05}", n // 3) for n in range(6000)]
    )
    ordered = db.execute(
        "SELECT updated_at, session_id FROM tasks ORDER BY updated_at DESC, session_id"
    ).fetchall()

    def steps_of_page(after: tuple[float, str] | None) -> int:
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        db.set_progress_handler(count, 100)  # once every 100 virtual machine instructions
        try:
            rows = db.execute(
                *page_query("SELECT session_id FROM tasks", "", "cli-", after, 100)
            ).fetchall()
        finally:
            db.set_progress_handler(None, 0)
        assert len(rows) == 101
        return steps

    first = steps_of_page(None)
    deep = steps_of_page(ordered[5000])
    assert deep < 2 * first, (first, deep)


# -- decoding stored messages ----------------------------------------------------------


_BODIES = [
    '{"role":"user","content":"hi"}',
    '{"role":"assistant","content":"","tool_calls":[{"id":"c1","name":"read_file",'
    '"arguments":{"path":"a"}}],"tool_call_id":null,"name":null}',
    '{"role":"tool","content":"x","tool_call_id":"c1","name":"read_file","call_state":"denied"}',
    '{"role":"note","content":"s","compaction":{"summarised":3,"kept":1}}',
    '{"role":"note","content":"r","rewinds":2}',
    # Out of the ordinary: the converter decides, as it always did.
    '{"role":"user","content":"hi","unknown":1}',
    '{"role":"user","content":"\\ud800"}',
    '{"role":"user","content":7}',
    '{"role":"note","content":"r","rewinds":"2"}',
]


# -- encoding messages ------------------------------------------------------------------

_TEXT = st.text(max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)


def _messages() -> st.SearchStrategy[Message]:
    from agentrt.models.messages import Compaction
    from agentrt.models.messages import Redaction
    from agentrt.models.messages import ThinkingBlock
    from agentrt.models.messages import ToolCall
    from agentrt.vocab.stops import CallState

    calls = st.builds(
        ToolCall,
        _TEXT,
        _TEXT,
        st.dictionaries(_TEXT, _JSON, max_size=3),
        st.sampled_from(Redaction),
    )
    blocks = st.builds(ThinkingBlock, _TEXT, st.none() | _TEXT, st.none() | _TEXT)
    return st.builds(
        Message,
        st.sampled_from(Role),
        _TEXT,
        tool_calls=st.lists(calls, max_size=2).map(tuple),
        tool_call_id=st.none() | _TEXT,
        name=st.none() | _TEXT,
        thinking=st.lists(blocks, max_size=2).map(tuple),
        call_state=st.none() | st.sampled_from(CallState),
        rewinds=st.none() | st.integers(min_value=0),
        compaction=st.none() | st.builds(Compaction, st.integers(0), st.integers(0)),
    )


def test_a_message_is_encoded_with_every_field_the_encoder_knows() -> None:
    """A field added to a message (or to what it holds) must be added to `message_object`:
    the property below draws only the fields listed here."""
    import attrs

    from agentrt.models.messages import Compaction
    from agentrt.models.messages import ThinkingBlock
    from agentrt.models.messages import ToolCall

    assert [f.name for f in attrs.fields(Message)] == [
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "name",
        "thinking",
        "call_state",
        "rewinds",
        "compaction",
    ]
    assert [f.name for f in attrs.fields(ToolCall)] == ["id", "name", "arguments", "redaction"]
    assert [f.name for f in attrs.fields(ThinkingBlock)] == ["text", "signature", "redacted"]
    assert [f.name for f in attrs.fields(Compaction)] == ["summarised", "kept"]


@given(_messages())
def test_a_message_is_encoded_as_the_converter_encodes_it(message: Message) -> None:
    """Key for key, in the converter's order, defaults left out where it leaves them out."""
    from agentrt.store.columns import encode_message
    from agentrt.store.columns import message_object
    from agentrt.store.record import converter

    expected = converter.unstructure(message, Message)
    made = message_object(message)
    assert made == expected
    assert json.dumps(made) == json.dumps(expected)  # the same keys in the same order
    role, body = encode_message(message)
    assert role == message.role.value
    assert converter.structure(json.loads(body), Message) == message


def test_stored_messages_decode_as_the_converter_decodes_them() -> None:
    from agentrt.store.columns import decode_message
    from agentrt.store.columns import decode_messages
    from agentrt.store.record import converter

    expected = [converter.structure(json.loads(body), Message) for body in _BODIES]
    assert decode_messages(_BODIES) == expected
    assert [decode_message(body) for body in _BODIES] == expected


@pytest.mark.parametrize(
    "bodies",
    [
        ['{"role":"user"}', '{"role":"sideways"}'],
        ['{"role":"user"},{"role":"user"}', " "],  # two values in one body, none in another
        ['{"role":"user"}]', '[{"role":"user"}'],
        ["[]"],
        ["{not json"],
    ],
)
def test_a_body_that_holds_no_message_is_never_read_as_one(bodies: list[str]) -> None:
    from agentrt.store.columns import decode_messages

    with pytest.raises(Exception):  # noqa: B017 - whichever error the parser or converter raises
        decode_messages(bodies)


def _stored(messages: list[Message], made: list[int]) -> Any:
    """`messages` as a store reads them back (`StoredMessages`); `made` gets the index of
    each one made a message."""
    from agentrt.models.messages import StoredMessages
    from agentrt.store.columns import encode_message
    from agentrt.store.columns import message_of
    from agentrt.store.columns import message_values

    def make(index: int, value: Any) -> Message:
        made.append(index)
        return message_of(value)

    values = message_values([encode_message(m)[1] for m in messages])
    assert values is not None
    return StoredMessages(values, make)


def test_a_run_reading_the_end_of_a_stored_history_makes_only_that_end() -> None:
    from agentrt.agent.compaction import Joined
    from agentrt.agent.compaction import prompt_of
    from agentrt.models.messages import model_view

    history = [*_conversation(5_000), Message.user("last question")]
    made: list[int] = []
    stored = _stored(history, made)
    live = [Message.user("hello")]
    prompt = prompt_of(Joined([Message.system("p")], Joined(model_view(stored), live)))
    assert len(prompt) == len(history) + 2 and made == []
    assert prompt[-2] == history[-1] and prompt[-1] is live[0]
    assert made == [len(history) - 1]
    assert list(stored) == history  # read whole, each is made once, the same as stored
    assert sorted(made) == list(range(len(history)))
    assert stored[len(history) - 1] is stored[len(history) - 1]


def test_stored_rewinds_and_compactions_are_seen_as_in_the_messages_themselves() -> None:
    from agentrt.agent.compaction import Joined
    from agentrt.agent.compaction import prompt_of
    from agentrt.models.messages import Compaction
    from agentrt.models.messages import model_view

    history = [
        *_conversation(40),
        Message(Role.NOTE, "summary", compaction=Compaction(30, 2)),
        *(Message.assistant(f"later {i}") for i in range(4)),
        Message(Role.NOTE, "rewound", rewinds=43),
        Message.user("again"),
    ]
    live = [Message.user("hello")]
    made: list[int] = []
    stored = _stored(history, made)
    seen = model_view(stored)
    assert list(seen) == list(model_view(history))
    expected = prompt_of(Joined([Message.system("p")], Joined(model_view(history), live)))
    assert list(prompt_of(Joined([Message.system("p")], Joined(seen, live)))) == list(expected)
    # A slice of a stored history (the part before a pending task) reads the same.
    assert list(prompt_of(_stored(history, made)[:41])) == prompt_of(history[:41])


async def test_a_stored_history_message_that_holds_none_is_told_when_read(
    store: Store, store_location: str | Path
) -> None:
    """A body that is JSON but no message stops nothing until read; read, it names itself."""
    await store.finish("cli-odd", _conversation(3))
    raw_sql(store, "UPDATE messages SET body = '{\"role\": 7}' WHERE session_id = 'cli-odd'")
    other = await open_test_store(store_location)  # nothing of cli-odd in its memory
    try:
        with pytest.raises(StoreError, match=r"history of session 'cli-odd' .* \(message 0"):
            await other.load_history("cli-odd")
    finally:
        await other.aclose()


async def test_a_rewind_stored_in_an_escaped_key_is_seen_as_any_other(
    store: Store, store_location: str | Path
) -> None:
    """A body that spells ``rewinds`` with a ``\\u`` escape (valid JSON, as a hand-edited file
    may hold) still rewinds: read from the file, the history the model sees leaves out the
    messages it rewinds, as it does once they are made."""
    from agentrt.models.messages import model_view
    from agentrt.store.columns import encode_message

    history = [*_conversation(6), Message(Role.NOTE, "rewound", rewinds=2), Message.user("on")]
    await store.finish("cli-escaped", history)
    body = encode_message(history[6])[1]  # the stored text of the note
    escaped = body.replace('"rewinds"', '"rewind\\u0073"')
    assert escaped != body and json.loads(escaped) == json.loads(body)
    raw_sql(
        store,
        "UPDATE messages SET body = ? WHERE session_id = 'cli-escaped' AND seq = 6",
        (escaped,),
    )
    other = await open_test_store(store_location)  # nothing of cli-escaped in its memory
    try:
        # As a run reads it: the history its task is created after, its messages made as read.
        stored = await other.create(TaskRecord("cli-escaped", "next", (Message.user("next"),)))
        assert list(model_view(stored)) == list(model_view(history))
        assert len(model_view(stored)) == len(history) - 4
    finally:
        await other.aclose()


@pytest.mark.parametrize("body", ["[1]", '"a message"', ' {"role": 7}', "{broken"])
async def test_a_stored_body_not_plainly_an_object_is_told_when_the_history_is_read(
    store: Store, store_location: str | Path, body: str
) -> None:
    """A body that is not JSON, or JSON but not a plain object, is not taken for a message
    without the fields a run asks about: reading the history (the model's view of it) says
    whose message cannot be read."""
    from agentrt.models.messages import model_view

    await store.finish("cli-odd", _conversation(5))
    raw_sql(store, "UPDATE messages SET body = ? WHERE session_id = 'cli-odd' AND seq = 2", (body,))
    other = await open_test_store(store_location)  # nothing of cli-odd in its memory
    # As a run reads it: the history its task is created after.
    task = TaskRecord("cli-odd", "next", (Message.user("next"),))
    try:
        with pytest.raises(StoreError, match=r"history of session 'cli-odd' .* \(message 2"):
            list(model_view(await other.create(task)))
    finally:
        await other.aclose()

"""The listing lines an SQLite store keeps in its rows read as the lines made from the records.

`agentrt pending list` on an SQLite store prints each task's kept line with its
time put in (`TaskStore.list_lines`); every line must be the one the records
themselves give (`agentrt.present.listing.lines` of `brief_of` each listed task), whatever
was done to the rows: written, marked, deleted, changed by hand, or written
before lines were kept.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import AsyncIterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agentrt import Cause
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt.present.listing import TIME_MARK
from agentrt.present.listing import filled
from agentrt.present.listing import lines as listing_lines
from agentrt.present.listing import template
from agentrt.store import brief_of
from agentrt.store.record import SavedQuestion
from agentrt.store.sql import SqlStore
from agentrt.store.sqlite import SCHEMA_VERSION
from agentrt.vocab.terminal import visible

from .conftest import fill_mixed_store
from .conftest import raw_sql


async def expected_lines(store: TaskStore, prefix: str = "") -> list[str]:
    """The lines the records give, each task read in full."""
    return listing_lines([brief_of(t) for t in await store.list_stored(prefix)])


def kept_lines(path: Path) -> dict[str, str | None]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT session_id, line FROM tasks").fetchall())
    finally:
        db.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[TaskStore]:
    """An SQLite store, the backend that keeps lines."""
    opened = await TaskStore.open(tmp_path / "tasks.db")
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
def read_in_full(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The session ids the store reads in full (from their records) while listing."""
    seen: list[Any] = []
    summary_rows = SqlStore._summary_rows

    def spy(self: SqlStore, db: Any, session_ids: Sequence[Any]) -> dict[Any, Any]:
        seen.extend(session_ids)
        return summary_rows(self, db, session_ids)

    monkeypatch.setattr(SqlStore, "_summary_rows", spy)
    return seen


async def test_a_paused_task_is_listed_from_its_kept_line(
    store: TaskStore, read_in_full: list[Any]
) -> None:
    path = store.path
    # A run saves its task while it works; the pause marks it in place.
    await store.save(TaskRecord("cli-one", "read a.txt", (), updated_at=5.0))
    assert await store.mark("cli-one", TaskStatus.INTERRUPTED, cause=Cause.PAUSE)
    question = SavedQuestion("c1", "Which colour is the sky on a clear day at noon?")
    await store.save(
        TaskRecord(
            "cli-asks",
            "x",
            (),
            status=TaskStatus.AWAITING_ANSWER,
            question=question,
            updated_at=4.0,
        )
    )
    await store.save(TaskRecord("cli-fails", "y" * 70, (), updated_at=3.0))
    assert await store.mark("cli-fails", TaskStatus.FAILED, error="boom")
    lines = await store.list_lines()
    assert lines == await expected_lines(store)
    # A mark is the newest change: the marked tasks come first.
    assert [line[21:49].rstrip() for line in lines] == [
        "failed",
        "interrupted (pause)",
        "awaiting_answer",
    ]
    assert lines[0].endswith("  " + "y" * 57 + "...")
    assert lines[2].endswith("  asks: Which colour is the sky on a clear day at noon?")
    assert read_in_full == []  # every line was kept, none read from its record
    kept = kept_lines(path)
    assert kept["cli-one"] == template("cli-one", "interrupted", "pause", None, "read a.txt")
    assert all(TIME_MARK in line for line in kept.values() if line is not None)


async def test_a_mark_from_any_status_to_any_other_keeps_the_right_line(store: TaskStore) -> None:
    path = store.path
    pairs = [
        (before, after, cause)
        for before in TaskStatus
        for after in TaskStatus
        for cause in (None, *Cause)
    ]
    for n, (before, after, cause) in enumerate(pairs):
        session = f"cli-{n}"
        await store.save(TaskRecord(session, f"task {n}", (), status=before))
        assert await store.mark(session, after, cause=cause)
    assert await store.list_lines() == await expected_lines(store)
    kept = kept_lines(path)
    for n, (before, after, cause) in enumerate(pairs):
        line = kept[f"cli-{n}"]
        if (before, None) == (after, cause):  # the same line: dropped, read in full
            assert line is None
        else:
            shown = f"{after.value} ({cause.value})" if cause else after.value
            assert line == template(
                f"cli-{n}", after.value, cause and cause.value, None, f"task {n}"
            )
            assert line is not None and line.startswith(f"{f'cli-{n}':<20} {shown} ")


async def test_a_row_changed_by_hand_loses_its_line_and_is_listed_from_its_record(
    store: TaskStore, read_in_full: list[Any]
) -> None:
    path = store.path
    for n, session in enumerate(("cli-runs", "cli-status", "cli-input", "cli-same")):
        record = TaskRecord(session, "work", (), status=TaskStatus.INTERRUPTED)
        await store.save(record.evolve(updated_at=10.0 - n))
    raw_sql(store, "UPDATE tasks SET runs = 'many' WHERE session_id = 'cli-runs'")
    raw_sql(store, "UPDATE tasks SET status = 'weird' WHERE session_id = 'cli-status'")
    raw_sql(store, "UPDATE tasks SET input = '\"else\"' WHERE session_id = 'cli-input'")
    raw_sql(store, "UPDATE tasks SET updated_at = 6.0 WHERE session_id = 'cli-same'")
    assert all(line is None for line in kept_lines(path).values())
    lines = await store.list_lines()
    assert lines == await expected_lines(store)
    assert sorted(read_in_full) == ["cli-input", "cli-runs", "cli-same", "cli-status"]
    assert "cannot be read; discard it with: agentrt pending discard cli-runs" in lines[0]
    assert lines[2].endswith("  else")  # what the row says now, not what its line said
    # The store's next write of a task keeps its line again.
    loaded = await store.load("cli-input")
    assert loaded is not None
    await store.save(loaded.evolve(updated_at=11.0))
    assert kept_lines(path)["cli-input"] is not None
    assert await store.list_lines() == await expected_lines(store)


async def test_a_running_task_is_read_in_full_to_say_whether_it_crashed(
    store: TaskStore, read_in_full: list[Any]
) -> None:
    await store.save(TaskRecord("cli-gone", "x", (), runner="999999999:1", updated_at=2.0))
    await store.save(TaskRecord("cli-here", "x", (), runner=store.runner, updated_at=1.0))
    lines = await store.list_lines()
    assert lines == await expected_lines(store)
    assert [line[21:49].rstrip() for line in lines] == ["crashed", "running"]
    assert read_in_full == ["cli-gone", "cli-here"]


async def test_tasks_whose_line_cannot_be_kept_are_listed_from_their_records(
    store: TaskStore,
) -> None:
    path = store.path
    paused = TaskStatus.INTERRUPTED
    await store.save(TaskRecord("cli-surrogate", "a \ud800", (), status=paused))
    await store.save(TaskRecord(f"cli-{TIME_MARK}mark", "b", (), status=paused))
    await store.save(TaskRecord("cli-long-session-id-of-many-chars", "c", (), status=paused))
    assert await store.mark(f"cli-{TIME_MARK}mark", paused, cause=Cause.PAUSE)
    kept = kept_lines(path)
    assert kept["cli-surrogate"] is None
    assert kept[f"cli-{TIME_MARK}mark"] is None
    assert kept["cli-long-session-id-of-many-chars"] is not None
    assert await store.list_lines() == await expected_lines(store)


async def test_the_mixed_listing_reads_the_same_from_lines(store: TaskStore) -> None:
    await fill_mixed_store(store)
    lines = await store.list_lines()
    assert len(lines) == 12
    assert lines == await expected_lines(store)
    assert await store.list_lines("cli-c") == await expected_lines(store, "cli-c")
    assert await store.list_lines("cli_") == []


async def test_pages_of_lines_read_as_the_listing_with_the_times_put_in(
    store: TaskStore,
) -> None:
    """`line_page` (what a daemon sends), from kept lines and as a store without them reads it."""
    await fill_mixed_store(store)
    paused = TaskStatus.INTERRUPTED
    await store.save(TaskRecord(f"cli-{TIME_MARK}mark", "b", (), status=paused))
    expected = await store.list_lines()
    assert len(expected) == 13
    for line_page in (store.line_page, functools.partial(SqlStore.line_page, store)):
        got: list[str] = []
        cursor = None
        while True:
            page = await line_page(limit=5, cursor=cursor)
            assert len(page.items) <= 5
            for line, second in page.items:
                assert TIME_MARK not in line.partition(TIME_MARK)[0]
                got.append(filled(line, second))
            if page.next is None:
                break
            cursor = page.next
        # The mark in a session id is shown before it is sent: printed, the lines are one.
        assert [visible(line) for line in got] == [visible(line) for line in expected]
        assert (await line_page("cli-c")).items == (await store.line_page("cli-c")).items
        assert (await line_page("cli_")).items == ()


async def test_a_listing_reads_the_index_of_tasks_by_time_alone(store: TaskStore) -> None:
    """`list_lines` and `line_page` (first pages and later ones) read no task's row: the index
    they are ordered by holds the columns they read."""
    await fill_mixed_store(store)
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    try:
        await store.list_lines()
        await store.list_lines("cli-p")
        first = await store.line_page(limit=3)
        await store.line_page(limit=3, cursor=first.next)
        await store.line_page("cli-", limit=3, cursor=first.next)
    finally:
        store._db.set_trace_callback(None)
    listings = [s for s in statements if s.startswith("SELECT CASE WHEN status")]
    assert len(listings) == 5
    # A page's cursor is read by itself: the time and id of the page's last row.
    keys = [s for s in statements if s.startswith("SELECT updated_at, session_id FROM tasks")]
    assert len(keys) == 3
    listings += keys
    db = sqlite3.connect(store.path)
    try:
        for sql in listings:
            plan = " ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql))
            assert plan == "SCAN tasks USING COVERING INDEX tasks_by_time" or plan.startswith(
                "SEARCH tasks USING COVERING INDEX tasks_by_time "
            ), (sql, plan)
    finally:
        db.close()


def downgrade_to_version_3(path: Path) -> None:
    """Make the store at `path` what schema version 3 wrote: no kept lines, no trigger."""
    db = sqlite3.connect(path)
    try:
        db.execute("DROP TRIGGER tasks_line_dropped")
        db.execute("DROP INDEX tasks_by_time")
        db.execute("CREATE INDEX tasks_by_time ON tasks(updated_at DESC, session_id)")
        db.execute("ALTER TABLE tasks DROP COLUMN line")
        db.execute("ALTER TABLE tasks DROP COLUMN journal")
        db.execute("ALTER TABLE sessions DROP COLUMN model")
        db.execute("PRAGMA user_version = 3")
        db.commit()
    finally:
        db.close()


async def test_a_version_3_store_gets_its_lines_when_opened(
    tmp_path: Path, read_in_full: list[Any]
) -> None:
    path = tmp_path / "tasks.db"
    store = await TaskStore.open(path)
    try:
        await fill_mixed_store(store)
        before = await store.list_lines()
    finally:
        await store.aclose()
    downgrade_to_version_3(path)
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(tasks)")}
    assert "line" not in columns
    store = await TaskStore.open(path)
    try:
        kept = kept_lines(path)
        readable = {"cli-paused", "cli-asks", "cli-failed", "cli-long", "cli-quoted"}
        assert {s for s, line in kept.items() if line is not None} >= readable
        for unreadable in ("cli-bad", "cli-status", "cli-cause", "cli-typed"):
            assert kept[unreadable] is None
        del read_in_full[:]
        assert await store.list_lines() == before == await expected_lines(store)
        assert set(read_in_full).isdisjoint(readable)
        # The trigger came with the migration: a change by hand drops a line.
        raw_sql(store, "UPDATE tasks SET cause = 'boredom' WHERE session_id = 'cli-paused'")
        assert kept_lines(path)["cli-paused"] is None
        assert await store.list_lines() == await expected_lines(store)
    finally:
        await store.aclose()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    db.close()


# -- whatever is done to the rows, the kept lines read as the records ---------------------

#: Few sessions, so that one is often written, marked and changed in turn.
SESSIONS = ("cli-a", f"cli-{TIME_MARK}", "cli-a-session-id-longer-than-twenty-é")
STATUSES = st.sampled_from(TaskStatus)
CAUSES = st.none() | st.sampled_from(Cause)
TEXTS = st.text(max_size=80)
STAMPS = st.floats(min_value=-1e9, max_value=4e9, allow_nan=False)

saves = st.tuples(
    st.just("save"),
    st.sampled_from(SESSIONS),
    STATUSES,
    CAUSES,
    TEXTS,
    st.none() | TEXTS,
    STAMPS,
    st.sampled_from([None, "999999999:1"]),
)
marks = st.tuples(st.just("mark"), st.sampled_from(SESSIONS), STATUSES, CAUSES)
damages = st.tuples(
    st.just("damage"),
    st.sampled_from(SESSIONS),
    st.sampled_from(
        [
            ("status", "weird"),
            ("cause", "boredom"),
            ("runs", "many"),
            ("input", '"by hand"'),
            ("input", '"oops'),
            ("question", "{not json"),
            ("question", '{"prompt": "who?"}'),
            ("updated_at", 7.5),
            ("window_hash", "other"),
        ]
    ),
)
deletes = st.tuples(st.just("delete"), st.sampled_from(SESSIONS))
OPERATIONS = st.lists(st.one_of(saves, marks, marks, damages, deletes), max_size=16)


async def apply(store: TaskStore, operation: tuple[Any, ...]) -> None:
    kind, session = operation[0], operation[1]
    if kind == "save":
        _, _, status, cause, text, prompt, updated, runner = operation
        question = SavedQuestion("c1", prompt) if prompt is not None else None
        record = TaskRecord(
            session,
            text,
            (),
            status=status,
            cause=cause,
            question=question,
            updated_at=updated,
            runner=runner,
        )
        await store.save(record)
    elif kind == "mark":
        await store.mark(session, operation[2], cause=operation[3])
    elif kind == "damage":
        column, value = operation[2]
        raw_sql(store, f"UPDATE tasks SET {column} = ? WHERE session_id = ?", (value, session))
    else:
        await store.delete(session)


async def paged_lines(store: TaskStore, prefix: str, limit: int) -> list[str]:
    """Every page of `line_page` of at most `limit` lines, each line's time put in."""
    got: list[str] = []
    cursor = None
    while True:
        page = await store.line_page(prefix, limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        got += [filled(line, second) for line, second in page.items]
        if page.next is None:
            return got
        cursor = page.next


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=OPERATIONS)
def test_kept_lines_read_as_the_records_whatever_is_done_to_the_rows(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[Any, ...]]
) -> None:
    path = tmp_path_factory.mktemp("lines") / "tasks.db"

    async def check() -> None:
        store = await TaskStore.open(path)
        try:
            for operation in operations:
                await apply(store, operation)
            assert await store.list_lines() == await expected_lines(store)
            assert await store.list_lines("cli-a") == await expected_lines(store, "cli-a")
            # What a daemon sends, page by page, prints the same once the times are put in.
            for prefix in ("", "cli-a"):
                paged = await paged_lines(store, prefix, 2)
                listed = await store.list_lines(prefix)
                assert [visible(line) for line in paged] == [visible(line) for line in listed]
        finally:
            await store.aclose()

    trio.run(check)

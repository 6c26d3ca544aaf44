"""Shared fixtures: a real runtime on a temporary SQLite store, a daemon serving it, event
recorders, and a deadline for every test.

Every test has a deadline (`DEFAULT_DEADLINE` seconds of real time, `E2E_DEADLINE`
for an end-to-end test, or what ``@pytest.mark.deadline(seconds)`` says): a Trio test still running then is
cancelled and fails with a message naming the deadline; any test, or its
teardown, still running `BACKSTOP` seconds later has every thread's traceback
dumped and ends the run (faulthandler), so a hang fails in seconds, not at
CI's limit. Real time, not Trio's clock: a test on a `MockClock` jumps its
clock forward whenever it waits on a thread.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import json
import os
import secrets
import shutil
import socket
import sqlite3
import tempfile
import threading
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Generator
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import Protocol
from typing import TypeVar

import attrs
import pytest
import trio

from agentrt import Answer
from agentrt import Cause
from agentrt import Entry
from agentrt import Event
from agentrt import Outcome
from agentrt import RunEnded
from agentrt import Runtime
from agentrt import ScriptedModel
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt import open_runtime
from agentrt.agent.sudo import PrivilegedResult
from agentrt.daemon import Daemon
from agentrt.daemon import serve
from agentrt.models.messages import Message
from agentrt.models.messages import ModelDelta
from agentrt.protocol.client import Client
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorFrame
from agentrt.store import Store
from agentrt.store.record import SavedQuestion

from .cli_process import running_daemon
from .fakes.llm_server import LLMServer

#: Seconds of real time a test may take unless it says otherwise.
DEFAULT_DEADLINE = 30.0
#: ...and an end-to-end test (``@pytest.mark.e2e``: real processes, browsers, terminals).
E2E_DEADLINE = 120.0
#: Seconds after a test's deadline when the whole run is stopped with every traceback.
BACKSTOP = 60.0


def deadline_of(item: pytest.Item) -> float:
    """The deadline `item` declares with ``@pytest.mark.deadline(seconds)``, else the default."""
    marker = item.get_closest_marker("deadline")
    if marker is not None:
        return float(marker.args[0])
    return E2E_DEADLINE if item.get_closest_marker("e2e") is not None else DEFAULT_DEADLINE


def _with_deadline(test: Callable[..., Awaitable[None]], seconds: float) -> Any:
    """`test` cancelled after `seconds` of real time, failing with a message that says so."""

    @functools.wraps(test)
    async def run_with_deadline(*args: Any, **kwargs: Any) -> None:
        token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:

            def expire() -> None:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(scope.cancel)

            timer = threading.Timer(seconds, expire)
            timer.daemon = True
            timer.start()
            try:
                await test(*args, **kwargs)
            finally:
                timer.cancel()
        if scope.cancelled_caught:
            pytest.fail(
                f"the test ran longer than its deadline of {seconds:g}s; if it is slow rather "
                "than stuck, give it @pytest.mark.deadline(SECONDS)",
                pytrace=False,
            )

    return run_with_deadline


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    # Before pytest-trio wraps the test function in trio.run: the deadline runs inside it.
    if (
        isinstance(item, pytest.Function)
        and item.get_closest_marker("trio") is not None
        and not hasattr(item.obj, "hypothesis")
    ):
        item.obj = _with_deadline(item.obj, deadline_of(item))
    return (yield)


_REAL_STDERR = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    # Output capture is suspended while plugins are configured: fd 2 is the real standard
    # error here, where a hanging test's tracebacks must go (its capture is never shown).
    config.stash[_REAL_STDERR] = os.dup(2)


def pytest_unconfigure(config: pytest.Config) -> None:
    os.close(config.stash[_REAL_STDERR])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    stderr = item.config.stash[_REAL_STDERR]
    faulthandler.dump_traceback_later(deadline_of(item) + BACKSTOP, exit=True, file=stderr)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


#: Variables that configure agentrt or a model provider from outside: no test may see the
#: developer's own (see `hermetic_configuration`).
OUTSIDE_CONFIGURATION = (
    "AGENTRT_CONFIG",
    "AGENTRT_APPROVAL",
    "AGENTRT_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
)


@pytest.fixture(scope="session")
def empty_config_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An `XDG_CONFIG_HOME` with no agentrt configuration in it."""
    return tmp_path_factory.mktemp("config-home")


@pytest.fixture(autouse=True)
def hermetic_configuration(empty_config_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every process it starts) reads no configuration file and no key or
    base URL of the developer's: a test that wants one sets it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(empty_config_home))
    for name in OUTSIDE_CONFIGURATION:
        monkeypatch.delenv(name, raising=False)


E = TypeVar("E")


class Startable(Protocol):
    """A server or a bot that runs until cancelled and says when it has started."""

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None: ...


S = TypeVar("S", bound=Startable)


async def started(nursery: trio.Nursery, service: S) -> S:
    """`service` running in `nursery`, once it has said it started."""
    await nursery.start(service.run)
    return service


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
        """Runs `argv` for real, as ``sudo -n`` would once verified (the tests run as root)."""
        from agentrt.agent.toolproc import run_tool

        self.commands.append(list(argv))
        done = await run_tool(argv, stdin=stdin or b"")
        return PrivilegedResult(done.returncode, done.output)


class Collect:
    """A model's `on_delta`: keeps every delta it is given."""

    def __init__(self) -> None:
        self.deltas: list[ModelDelta] = []

    async def __call__(self, delta: ModelDelta) -> None:
        self.deltas.append(delta)


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


def scripted_runtime(
    state: Path,
    workdir: Path,
    *,
    stream_delay: float = 0,
    restricted_paths: Sequence[Path] = (),
    **options: Any,
) -> contextlib.AbstractAsyncContextManager[Runtime]:
    """A runtime with its state in `state` and its tools in `workdir`, on the scripted model
    (its words at once, its streamed pieces `stream_delay` seconds apart); `options` go to
    `open_runtime` as they are."""
    return open_runtime(
        state,
        model=ScriptedModel(word_delay=0, stream_delay=stream_delay),
        workdir=workdir,
        restricted_paths=list(restricted_paths),
        **options,
    )


def runtime_in(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier, **options: Any
) -> contextlib.AbstractAsyncContextManager[Runtime]:
    """The `runtime` fixture's runtime: its state in ``tmp_path/state``, ``tmp_path/restricted``
    out of the tools' reach; `options` go to `open_runtime` as they are."""
    return scripted_runtime(
        tmp_path / "state",
        workdir,
        restricted_paths=[tmp_path / "restricted"],
        verifier=verifier,
        **options,
    )


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
    async with runtime_in(tmp_path, workdir, verifier) as rt:
        yield rt


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh folder with a short path: a Unix socket's path may be at most 108 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="agt-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def sock_path(short_dir: Path) -> Path:
    """Where the `daemon` fixture listens (in a folder of its own, as the default is)."""
    return short_dir / "run" / "daemon.sock"


@pytest.fixture
async def llm_server(nursery: trio.Nursery) -> LLMServer:
    """The scripted model API (OpenAI and Anthropic dialects) on loopback, for the test."""
    server = LLMServer()
    await nursery.start(server.run)
    return server


@pytest.fixture(params=["no daemon", "daemon"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """The state folder of an `agentrt` command run as a process, once with no daemon (the command
    works on the store itself) and once with a daemon process holding it (the command goes
    through it)."""
    path = tmp_path / "state"
    if request.param == "daemon":
        # The daemon works elsewhere: the command's own folder must still be where tools work.
        with running_daemon(path, tmp_path / "daemon-work"):
            yield path
    else:
        yield path


@pytest.fixture
async def daemon(runtime: Runtime, sock_path: Path, nursery: trio.Nursery) -> Daemon:
    """A daemon serving `runtime` on `sock_path`, in the test's nursery."""
    started: Daemon = await nursery.start(serve, sock_path, runtime)
    return started


# -- the store backends: SQLite, and PostgreSQL where one answers --------------------------

#: The variable naming the PostgreSQL database the PostgreSQL tests use (each in a schema of
#: its own, dropped after).
POSTGRES_ENV = "AGENTRT_TEST_POSTGRES"
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
#: The backends the store tests run against.
BACKENDS = ("sqlite", "postgresql")


@functools.cache
def _postgres_problem(url: str) -> str | None:
    """Why the database at `url` cannot be used (None when it can), asked once per run."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def with_schema(url: str, schema: str) -> str:
    """`url` with its connections' search_path set to `schema` (a libpq option)."""
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


@pytest.fixture
def postgres_base() -> str:
    """The test database's URL; the test is skipped, naming the variable, where none answers.

    Under CI (``CI`` set) a missing database fails the test instead: there it must run.
    """
    base = os.environ.get(POSTGRES_ENV, "").strip() or DEFAULT_POSTGRES
    problem = _postgres_problem(base)
    if problem is not None:
        message = (
            f"no PostgreSQL answers at {base} ({problem}); set {POSTGRES_ENV} to a database "
            "URL to run the PostgreSQL tests"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return base


@pytest.fixture
def postgres_url(postgres_base: str) -> Iterator[str]:
    """A URL of the test database whose connections use a fresh schema, dropped after."""
    import psycopg

    schema = "agentrt_test_" + secrets.token_hex(6)
    with psycopg.connect(postgres_base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield with_schema(postgres_base, schema)
    finally:
        with psycopg.connect(postgres_base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=BACKENDS)
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """Where a store of each backend lives: an SQLite file, or a PostgreSQL schema."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return tmp_path / "state" / "tasks.db"


async def open_test_store(location: str | Path) -> Store:
    """A store at `location`; on PostgreSQL with a lease long enough for any test."""
    if isinstance(location, str):
        from agentrt.store.postgres import PgStore

        return await PgStore.open(location, lease=3600)
    return await TaskStore.open(location)


@pytest.fixture
async def store(store_location: str | Path) -> AsyncIterator[Store]:
    """A store of each backend (the test runs once for each)."""
    opened = await open_test_store(store_location)
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
async def any_runtime(
    store_location: str | Path, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> AsyncIterator[Runtime]:
    """The `runtime` fixture on each backend (the test runs once for each)."""
    async with runtime_in(tmp_path, workdir, verifier, store=store_location) as rt:
        yield rt


def raw_sql(store: Store, sql: str, params: Sequence[Any] = ()) -> None:
    """Run `sql` (``?`` parameters) on the store's database by hand, as a damaged file would be."""
    if isinstance(store, TaskStore):
        db = sqlite3.connect(store.path)
        try:
            db.execute(sql, params)
            db.commit()
        finally:
            db.close()
        return
    import psycopg

    from agentrt.store.postgres import PgStore

    assert isinstance(store, PgStore)
    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), tuple(params))


def insert_unreadable(store: Store, session_id: str) -> None:
    """Write a pending task whose saved question and message are damaged, on either backend."""
    raw_sql(
        store,
        "INSERT INTO tasks(session_id, status, runs, created_at, updated_at, input, question, "
        "first_seq, message_count) VALUES (?, 'interrupted', 1, 0, 0, '\"x\"', ?, 0, 1)",
        (session_id, "{not json"),
    )
    raw_sql(
        store,
        "INSERT INTO sessions(session_id, created_at, updated_at, next_seq, rev) "
        "VALUES (?, 0, 0, 1, 1)",
        (session_id,),
    )
    raw_sql(
        store,
        "INSERT INTO messages(session_id, seq, role, created_at, body) VALUES (?, 0, 'user', 0, ?)",
        (session_id, json.dumps({"not": "a message"})),
    )


async def fill_mixed_store(store: Store, base: float = 1_700_000_000.0) -> None:
    """One pending task of each kind a listing shows, the newest first in this order.

    Besides the common ones (paused, plain input, short or long): crashed ones (their
    process gone; none recorded), a running one, a question, a failure, input with
    escapes, and unreadable ones (bad JSON, an unknown status or cause, and in SQLite
    a number column holding text).
    """
    paused = TaskStatus.INTERRUPTED
    tasks = [
        TaskRecord("cli-paused", "a task", (), status=paused, cause=Cause.PAUSE),
        TaskRecord("cli-crashed", "working", (), runner="999999999:1", cause=Cause.SHUTDOWN),
        TaskRecord("cli-nobody", "working", (), runner=None),
        TaskRecord("cli-running", "working", (), runner=store.runner),
        TaskRecord(
            "cli-asks",
            "x" * 100,
            (),
            status=TaskStatus.AWAITING_ANSWER,
            question=SavedQuestion(
                "c1", "Which colour is the sky on a clear day, at noon, in June?"
            ),
        ),
        TaskRecord("cli-failed", "try", (), status=TaskStatus.FAILED, error="boom"),
        TaskRecord("cli-long", "y" * 61, (), status=paused, cause=Cause.DISCONNECT),
        TaskRecord("cli-quoted", 'say "hi" \\ then\tbye, é', (), status=paused),
        TaskRecord("cli-status", "odd", ()),
        TaskRecord("cli-cause", "odd", (), status=paused),
        TaskRecord("cli-typed", "odd", (), status=paused),
    ]
    for n, record in enumerate(tasks):
        await store.save(attrs.evolve(record, updated_at=base - n))
    insert_unreadable(store, "cli-bad")  # its question is not JSON; updated at 0
    raw_sql(store, "UPDATE tasks SET status = 'weird' WHERE session_id = 'cli-status'")
    raw_sql(store, "UPDATE tasks SET cause = 'boredom' WHERE session_id = 'cli-cause'")
    if isinstance(store, TaskStore):  # PostgreSQL keeps every column to its type
        raw_sql(store, "UPDATE tasks SET runs = 'many' WHERE session_id = 'cli-typed'")


def insert_unreadable_record(db_path: Path, session_id: str) -> None:
    """Write a pending task whose saved question and message are damaged, as a bad file would be."""
    db = sqlite3.connect(db_path)
    try:
        db.execute(
            "INSERT INTO tasks(session_id, status, runs, created_at, updated_at, input, question, "
            "first_seq, message_count) VALUES (?, 'interrupted', 1, 0, 0, '\"x\"', ?, 0, 1)",
            (session_id, "{not json"),
        )
        db.execute(
            "INSERT INTO sessions(session_id, created_at, updated_at, next_seq, rev) "
            "VALUES (?, 0, 0, 1, 1)",
            (session_id,),
        )
        db.execute(
            "INSERT INTO messages(session_id, seq, role, created_at, body) VALUES (?, 0, 'user', 0, ?)",
            (session_id, json.dumps({"not": "a message"})),
        )
        db.commit()
    finally:
        db.close()


async def answer_all(
    runtime: Runtime,
    prefix: str,
    answer: Callable[[Entry], str | None],
    asked: list[Entry],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A listener for `prefix` that records each question and answers it with `answer(entry)`.

    `answer` returning None leaves the question open.
    """
    with runtime.registry.listen(prefix, name="test") as listener:
        task_status.started()
        while True:
            entry = await listener.claim()
            asked.append(entry)
            value = answer(entry)
            if value is not None:
                entry.answer(Answer(value))


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


async def answered_and_finished(client: Client, ask_id: str, answer: str) -> EndedFrame:
    """Answer the question `ask_id` with `answer`; the end of its run, which finished with the
    scripted model saying what was answered."""
    await client.send(AnswerFrame(ask_id, answer))
    ended = await client.wait_for(EndedFrame)
    assert ended.outcome is Outcome.FINISHED
    assert ended.text is not None and f"You answered: {answer}" in ended.text
    return ended


async def refused(client: Client, line: bytes) -> ErrorFrame:
    """The error frame the daemon answers the raw frame `line` with (its newline added here)."""
    await client.send_raw(line + b"\n")
    frame = await client.receive()
    assert isinstance(frame, ErrorFrame)
    return frame


async def run_answering(
    runtime: Runtime,
    session: str,
    text: str,
    answer: Callable[[Entry], Awaitable[Answer]],
    limit: float = 10,
) -> tuple[RunEnded, Recorder]:
    """Run `text` as a task of `session` while a listener claims every question of the terminal
    sessions (``cli-``) and gives it what `answer` says; the run's end and its events."""
    recorder = Recorder()
    async with questions_answered(runtime, answer):
        with trio.fail_after(limit):
            ended = await runtime.executor.run(session, text, owner="t", emit=recorder)
    return ended, recorder


@contextlib.asynccontextmanager
async def questions_answered(
    runtime: Runtime, answer: Callable[[Entry], Awaitable[Answer]], prefix: str = "cli-"
) -> AsyncIterator[None]:
    """While inside, a listener claims every question of the sessions named `prefix`... and
    gives it what `answer` says."""
    async with trio.open_nursery() as nursery:

        async def listen(task_status: trio.TaskStatus[None]) -> None:
            with runtime.registry.listen(prefix) as listener:
                task_status.started()
                while True:
                    entry = await listener.claim()
                    entry.answer(await answer(entry))

        await nursery.start(listen)
        yield
        nursery.cancel_scope.cancel()


def results_in_call_order(history: Sequence[Message]) -> list[str]:
    """The tool results of `history` in the order their calls were issued (a round's calls
    run side by side and may end, and be saved, in any order)."""
    order = [call.id for message in history for call in message.tool_calls]
    results = [m for m in history if m.role.value == "tool"]
    results.sort(key=lambda m: order.index(m.tool_call_id or ""))
    return [m.content for m in results]


def write_config(env: dict[str, str], text: str) -> Path:
    """Write `text` as the configuration file of the environment `env` (its XDG_CONFIG_HOME)."""
    path = Path(env["XDG_CONFIG_HOME"]) / "agentrt" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path

"""Configured models: a session runs with the model chosen for it, kept in the store with it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from agentrt import Message
from agentrt import Outcome
from agentrt import Runtime
from agentrt import TaskRecord
from agentrt import TaskStore
from agentrt.client import Client
from agentrt.config.settings import ConfigError
from agentrt.config.settings import load_settings
from agentrt.core.errors import ModelNotConfiguredError
from agentrt.core.errors import UnknownModelError
from agentrt.daemon import serve
from agentrt.frames import EndedFrame
from agentrt.frames import ErrorCode
from agentrt.frames import ErrorFrame
from agentrt.frames import ModelList
from agentrt.frames import ModelsAction
from agentrt.frames import ModelsRequest
from agentrt.frames import Run
from agentrt.store import NoUserMessageError
from agentrt.store import Store
from agentrt.store import TaskExistsError

from .conftest import FakeVerifier
from .conftest import Recorder
from .conftest import open_test_store
from .conftest import runtime_in
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import sse

LIMIT = 20


# -- the store ---------------------------------------------------------------------------


async def test_a_sessions_model_is_kept_with_it_and_read_back(
    store: Store, store_location: str | Path
) -> None:
    assert await store.session_model("cli-a") is None
    # Chosen before its first message: kept, owned by the window, but not listed yet.
    await store.set_session_model("cli-a", "openai:m1", window_hash="w1")
    assert await store.session_model("cli-a") == "openai:m1"
    assert await store.owner("cli-a") == "w1"
    assert (await store.sessions("cli-")).items == ()
    info = await store.session("cli-a")
    assert info is not None and info.model == "openai:m1" and info.messages == 0
    # The first message gives it its title and lists it; the model stays.
    await store.save(TaskRecord("cli-a", "hello there", (Message.user("hello there"),)))
    await store.finish("cli-a", [Message.user("hello there"), Message.assistant("hi")])
    [listed] = (await store.sessions("cli-")).items
    assert (listed.title, listed.messages, listed.model) == ("hello there", 2, "openai:m1")
    await store.set_session_model("cli-a", "anthropic:m2")
    await store.aclose()
    reopened = await open_test_store(store_location)
    try:
        assert await reopened.session_model("cli-a") == "anthropic:m2"
        # None chooses the default again; forgetting the session forgets its model.
        await reopened.set_session_model("cli-a", None)
        assert await reopened.session_model("cli-a") is None
        await reopened.set_session_model("cli-a", "openai:m1")
        assert await reopened.forget("cli-a")
        assert await reopened.session_model("cli-a") is None
    finally:
        await reopened.aclose()


async def test_a_session_with_only_a_model_keeps_it_when_its_first_task_goes(
    store: Store,
) -> None:
    await store.set_session_model("cli-b", "openai:m1")
    await store.save(TaskRecord("cli-b", "first", (Message.user("first"),)))
    assert await store.delete("cli-b")
    assert await store.session_model("cli-b") == "openai:m1"
    assert (await store.sessions("cli-")).items == ()
    # Without a model chosen, a session left with no message goes, as before.
    await store.save(TaskRecord("cli-c", "first", (Message.user("first"),)))
    assert await store.delete("cli-c")
    assert await store.session("cli-c") is None


async def test_an_update_is_given_the_sessions_model_in_its_transaction_and_may_refuse(
    store: Store,
) -> None:
    await store.create(TaskRecord("cli-u", "x", (Message.user("x"),)))
    seen: list[str | None] = []

    def claim(record: TaskRecord) -> TaskRecord:
        return record.evolve(runs=record.runs + 1)

    claimed = await store.update("cli-u", claim, model=seen.append)
    assert claimed is not None
    await store.set_session_model("cli-u", "openai:m1")

    def refuse(chosen: str | None) -> None:
        seen.append(chosen)
        raise ModelNotConfiguredError(f"no key for {chosen}")

    with pytest.raises(ModelNotConfiguredError, match="no key for openai:m1"):
        await store.update("cli-u", claim, model=refuse)
    assert await store.load("cli-u") == claimed[0]  # nothing written
    # A session with no task is given its model too (a resume is refused for it first).
    await store.set_session_model("cli-none", "anthropic:m2")
    assert await store.update("cli-none", claim, model=seen.append) is None
    assert await store.update("cli-nothing", claim, model=seen.append) is None
    assert seen == [None, "openai:m1", "anthropic:m2", None]


async def test_a_version_5_sqlite_store_gains_the_model_column(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    store = await TaskStore.open(path)
    await store.finish("cli-old", [Message.user("hello"), Message.assistant("hi")])
    await store.aclose()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE sessions DROP COLUMN model")
    db.execute("DROP TABLE token_usage")
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    store = await TaskStore.open(path)
    try:
        assert await store.session_model("cli-old") is None
        await store.set_session_model("cli-old", "openai:m1")
        assert await store.session_model("cli-old") == "openai:m1"
        assert [m.content for m in await store.load_history("cli-old")] == ["hello", "hi"]
    finally:
        await store.aclose()


# -- the runs ----------------------------------------------------------------------------


def _settings(tmp_path: Path, openai: LLMServer, anthropic: LLMServer) -> object:
    config = tmp_path / "config.toml"
    config.write_text(
        'models = ["openai:m1", "anthropic:m2"]\n\n'
        f'[openai]\nbase_url = "{openai.base_url}/v1"\n\n'
        f'[anthropic]\nbase_url = "{anthropic.base_url}"\n',
        "utf-8",
    )
    return load_settings(
        environ={"AGENTRT_CONFIG": str(config), "AGENTRT_STATE_DIR": str(tmp_path / "state")}
    )


async def test_a_run_talks_to_the_model_its_session_was_switched_to(
    tmp_path: Path,
    workdir: Path,
    verifier: FakeVerifier,
    store_location: str | Path,
    nursery: trio.Nursery,
) -> None:
    openai, anthropic = LLMServer(), LLMServer()
    await nursery.start(openai.run)
    await nursery.start(anthropic.run)
    openai.script(sse([oa_text("from m1"), oa_finish(), OA_DONE]))
    anthropic.script(sse([an_start(), *an_text_block(0, ["from m2"]), *an_end()]))
    settings = _settings(tmp_path, openai, anthropic)
    with trio.fail_after(LIMIT):
        async with runtime_in(
            tmp_path, workdir, verifier, store=store_location, settings=settings
        ) as runtime:
            executor = runtime.executor
            entries = executor.models()
            assert [(e.name, e.default, e.usable) for e in entries] == [
                ("scripted", True, True),
                ("openai:m1", False, True),
                ("anthropic:m2", False, True),
            ]
            assert await executor.session_model("cli-x") == "scripted"
            await executor.choose_model("cli-x", "anthropic:m2")
            ended = await executor.run("cli-x", "tell m2", owner="o", emit=Recorder())
            assert (ended.outcome, ended.text) == (Outcome.FINISHED, "from m2")
            [asked] = anthropic.requests
            assert asked.json()["model"] == "m2"
            assert "tell m2" in str(asked.json()["messages"])
            assert openai.requests == []
            # Another session still runs with the default.
            other = await executor.run("cli-y", "hello", owner="o", emit=Recorder())
            assert other.outcome is Outcome.FINISHED and len(anthropic.requests) == 1
        # A restart finds the session's model where it was left.
        async with runtime_in(
            tmp_path, workdir, verifier, store=store_location, settings=settings
        ) as runtime:
            assert await runtime.executor.session_model("cli-x") == "anthropic:m2"
            await runtime.executor.choose_model("cli-x", "openai:m1")
            ended = await runtime.executor.run("cli-x", "now m1", owner="o", emit=Recorder())
            assert ended.text == "from m1"
            [asked] = openai.requests
            assert asked.json()["model"] == "m1"
            # The whole conversation goes to the model switched to.
            said = str(asked.json()["messages"])
            assert "tell m2" in said and "from m2" in said and "now m1" in said


async def test_a_model_without_its_key_is_listed_with_why_and_cannot_be_chosen(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    async with runtime_in(tmp_path, workdir, verifier, models=["openai:gpt-x"]) as runtime:
        executor = runtime.executor
        default, hosted = executor.models()
        assert (default.name, default.usable, default.why) == ("scripted", True, None)
        assert (hosted.name, hosted.default, hosted.usable) == ("openai:gpt-x", False, False)
        assert hosted.why is not None and "no API key" in hosted.why
        assert "OPENAI_API_KEY" in hosted.why
        with pytest.raises(ModelNotConfiguredError, match="no API key"):
            await executor.choose_model("cli-k", "openai:gpt-x")
        with pytest.raises(UnknownModelError, match="not configured"):
            await executor.choose_model("cli-k", "anthropic:nope")
        assert await runtime.store.session_model("cli-k") is None
        # A key stored while it runs makes it usable.
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        assert executor.models()[1].usable
        await executor.choose_model("cli-k", "openai:gpt-x")
        assert await executor.session_model("cli-k") == "openai:gpt-x"


async def test_a_session_whose_model_is_no_longer_configured_is_refused_clearly(
    runtime: Runtime,
) -> None:
    await runtime.store.set_session_model("cli-gone", "openai:removed")
    with pytest.raises(ModelNotConfiguredError, match="is not configured any more"):
        await runtime.executor.run("cli-gone", "hi", owner="o", emit=Recorder())
    assert await runtime.store.load("cli-gone") is None


async def test_a_resume_is_refused_for_a_model_chosen_while_paused_that_is_not_configured(
    runtime: Runtime,
) -> None:
    parked = await runtime.executor.run("cli-p", "ask which?", owner="o", emit=Recorder())
    assert parked.outcome is Outcome.AWAITING_ANSWER
    before = await runtime.store.load("cli-p")
    await runtime.store.set_session_model("cli-p", "openai:removed")
    with pytest.raises(ModelNotConfiguredError, match="is not configured any more"):
        await runtime.executor.resume("cli-p", answer="blue", owner="o", emit=Recorder())
    # Refused before the task was touched: it waits for its answer as it did.
    assert await runtime.store.load("cli-p") == before
    assert not runtime.executor.is_running("cli-p")
    await runtime.store.set_session_model("cli-p", None)
    ended = await runtime.executor.resume("cli-p", answer="blue", owner="o", emit=Recorder())
    assert ended.outcome is Outcome.FINISHED


def test_the_models_list_is_checked_where_it_is_read(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('model = "openai:a"\nmodels = ["openai:b", "bogus"]\n', "utf-8")
    with pytest.raises(ConfigError, match=r"config.toml:2: models: unknown model 'bogus'"):
        load_settings(environ={"AGENTRT_CONFIG": str(config)})
    config.write_text('model = "openai:a"\nmodels = ["openai:b", "openai:a"]\n', "utf-8")
    settings = load_settings(environ={"AGENTRT_CONFIG": str(config)})
    assert settings.model_list == ("openai:a", "openai:b")


# -- the daemon's models frame -------------------------------------------------------------


async def test_the_models_frame_lists_and_switches_a_windows_session(
    tmp_path: Path,
    workdir: Path,
    verifier: FakeVerifier,
    sock_path: Path,
    llm_server: LLMServer,
    nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{llm_server.base_url}/v1")
    llm_server.script(sse([oa_text("from m1"), oa_finish(), OA_DONE]))
    async with runtime_in(
        tmp_path, workdir, verifier, models=["openai:m1", "anthropic:hosted"]
    ) as runtime:
        daemon = await nursery.start(serve, sock_path, runtime)
        with trio.fail_after(LIMIT):
            async with await Client.connect(daemon.socket_path, window="w1") as client:
                await client.send(ModelsRequest(ModelsAction.LIST))
                listed = await client.wait_for(ModelList)
                assert (listed.session, listed.current) == (None, "scripted")
                assert [(m.name, m.default, m.usable) for m in listed.models] == [
                    ("scripted", True, True),
                    ("openai:m1", False, True),
                    ("anthropic:hosted", False, False),
                ]
                assert "ANTHROPIC_API_KEY" in (listed.models[2].why or "")
                # A switch with no session makes one, owned by this window.
                await client.send(ModelsRequest(ModelsAction.SET, model="openai:m1"))
                switched = await client.wait_for(ModelList)
                session = switched.session
                assert session is not None and session.startswith("cli-")
                assert switched.current == "openai:m1"
                await client.send(Run("to m1", session))
                ended = await client.wait_for(EndedFrame)
                assert ended.text == "from m1"
                assert "to m1" in str(llm_server.requests[0].json()["messages"])
                for model, code in (
                    ("anthropic:hosted", ErrorCode.STATE),
                    ("x:y", ErrorCode.NOT_FOUND),
                ):
                    await client.send(ModelsRequest(ModelsAction.SET, session, model))
                    refused = await client.wait_for(ErrorFrame)
                    assert (refused.code, refused.ref) == (code, "models")
                await client.send(ModelsRequest(ModelsAction.SET, session))
                refused = await client.wait_for(ErrorFrame)
                assert refused.message == "models set needs the model to set"
                await client.send(ModelsRequest(ModelsAction.LIST, session))
                assert (await client.wait_for(ModelList)).current == "openai:m1"
                # Another live window may neither see nor switch it.
                async with await Client.connect(daemon.socket_path, window="w2") as other:
                    await other.send(ModelsRequest(ModelsAction.SET, session, "scripted"))
                    hidden = await other.wait_for(ErrorFrame)
                    assert hidden.code is ErrorCode.NOT_FOUND
                assert await runtime.store.session_model(session) == "openai:m1"
        await daemon.shutdown()


# -- replacing the last turn ---------------------------------------------------------------


async def test_the_last_turn_is_replaced_in_one_transaction_or_not_at_all(store: Store) -> None:
    first = [Message.user("one"), Message.assistant("reply one")]
    second = [Message.user("two"), Message.assistant("reply two"), Message.note("stopped")]
    await store.finish("chat-t", [*first, *second])
    made: list[str] = []

    def make(text: str) -> TaskRecord:
        made.append(text)
        return TaskRecord("chat-t", "two again", (Message.user("two again"),))

    record, history = await store.replace_last_turn("chat-t", make)
    assert made == ["two"]
    assert [m.content for m in history] == ["one", "reply one"]
    assert record.transcript == (Message.user("two again"),)
    stored = await store.messages("chat-t")
    assert [m.message.content for m in stored.items] == ["one", "reply one", "two again"]
    # A pending task (this one) refuses it, writing nothing.
    with pytest.raises(TaskExistsError):
        await store.replace_last_turn("chat-t", make)
    assert made == ["two"]
    await store.finish("chat-t", [*first, Message.user("two again"), Message.assistant("r")])
    # A `make` that raises writes nothing either.

    def refuse(text: str) -> TaskRecord:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await store.replace_last_turn("chat-t", refuse)
    assert len((await store.messages("chat-t")).items) == 4
    # A session with no message of the user's: nothing to replace.
    await store.set_session_model("chat-empty", "scripted")
    with pytest.raises(NoUserMessageError, match="no message to replace"):
        await store.replace_last_turn("chat-empty", make)
    # Its only exchange replaced, a session keeps its model and takes the new title.
    await store.finish("chat-empty", [Message.user("# Hello"), Message.assistant("hi")])
    await store.replace_last_turn(
        "chat-empty", lambda _: TaskRecord("chat-empty", "bye", (Message.user("bye"),))
    )
    info = await store.session("chat-empty")
    assert info is not None and (info.title, info.model, info.messages) == ("bye", "scripted", 1)


async def test_a_redo_gives_the_model_the_conversation_before_the_replaced_message(
    tmp_path: Path,
    workdir: Path,
    verifier: FakeVerifier,
    llm_server: LLMServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{llm_server.base_url}/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm_server.script(
        sse([oa_text("again"), oa_finish(), OA_DONE]),
        sse([oa_text("edited"), oa_finish(), OA_DONE]),
    )
    async with runtime_in(tmp_path, workdir, verifier, models=["openai:m1"]) as runtime:
        executor = runtime.executor
        await executor.run("chat-x", "first", owner="o", emit=Recorder())
        await executor.run("chat-x", "second", owner="o", emit=Recorder())
        assert len(await runtime.store.load_history("chat-x")) == 4
        await executor.choose_model("chat-x", "openai:m1")
        ended = await executor.redo("chat-x", owner="o", emit=Recorder())
        assert ended.text == "again"
        said = [(m["role"], m["content"]) for m in llm_server.requests[0].json()["messages"]]
        # The scripted model echoes: its reply to "second" was "second", and is gone.
        assert [s for s in said if s[0] != "system"] == [
            ("user", "first"),
            ("assistant", "first"),
            ("user", "second"),
        ]
        ended = await executor.redo("chat-x", "third", owner="o", emit=Recorder())
        assert ended.text == "edited"
        said = [(m["role"], m["content"]) for m in llm_server.requests[1].json()["messages"]]
        assert [s for s in said if s[0] != "system"] == [
            ("user", "first"),
            ("assistant", "first"),
            ("user", "third"),
        ]
        history = [m.content for m in await runtime.store.load_history("chat-x")]
        assert history[2:] == ["third", "edited"]

"""Tools against the agent's own state, as a prompt-injected model would try it.

The state dir (store, secrets, token) is off-limits to every tool however the
path is spelled; a stored secret value that reaches a tool's output anyway is
replaced by ``[secret NAME]`` before the transcript, an event or the model sees
it; restricted paths are recognised after resolving them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from agentrt import ALLOW_ONCE
from agentrt import Answer
from agentrt import Entry
from agentrt import Message
from agentrt import Outcome
from agentrt import RequestKind
from agentrt import Runtime
from agentrt import TextEvent
from agentrt import ToolResultEvent
from agentrt.agent.guard import Redactor
from agentrt.agent.guard import command_touches
from agentrt.agent.guard import mentioned_paths
from agentrt.core.runtime import HTTP_TOKEN_FILE

from .conftest import Recorder
from .conftest import run_answering

LIMIT = 10
SECRET = "sk-canary-7f3a9b2e"
TOKEN = "tok-canary-1c2d3e4f"


@pytest.fixture
def planted(runtime: Runtime) -> Path:
    runtime.secrets.put("openai_api_key", SECRET)
    token = runtime.state_dir / HTTP_TOKEN_FILE
    token.write_text(TOKEN)
    return runtime.state_dir


async def asked_nothing_run(
    runtime: Runtime, session: str, text: str, asked: list[Entry]
) -> Recorder:
    """Run `text` with a listener that records (and allows) whatever is asked."""

    async def give(entry: Entry) -> Answer:
        asked.append(entry)
        return Answer(ALLOW_ONCE)

    _, recorder = await run_answering(runtime, session, text, give, LIMIT)
    return recorder


async def everything_persisted(runtime: Runtime, session: str) -> str:
    history = await runtime.store.load_history(session)
    record = await runtime.store.load(session)
    messages: list[Message] = [*history, *(record.transcript if record else ())]
    return "\n".join(m.content for m in messages)


def spellings(state: Path, workdir: Path, name: str) -> list[str]:
    target = state / "secrets" / name
    link = workdir / "innocent"
    if not link.exists():
        link.symlink_to(state)
    return [
        str(target),
        os.path.relpath(target, workdir),
        f"./{os.path.relpath(target, workdir)}",
        f"{workdir}/../{state.name}/./secrets/{name}",
        f"innocent/secrets/{name}",
        f"/proc/self/root{target}",
    ]


async def test_read_file_never_reads_a_secret_however_the_path_is_spelled(
    runtime: Runtime, planted: Path, workdir: Path
) -> None:
    for n, path in enumerate(spellings(planted, workdir, "openai_api_key")):
        asked: list[Entry] = []
        recorder = await asked_nothing_run(runtime, f"cli-r{n}", f"read {path}", asked)
        (result,) = recorder.of(ToolResultEvent)
        assert not result.ok, path
        assert "agentrt's own state" in result.preview, path
        assert asked == [], path
        assert SECRET not in repr(recorder.events)
        assert SECRET not in await everything_persisted(runtime, f"cli-r{n}")


async def test_the_token_and_the_store_are_off_limits_to_read_and_write(
    runtime: Runtime, planted: Path
) -> None:
    asked: list[Entry] = []
    recorder = await asked_nothing_run(
        runtime,
        "cli-tok",
        f"read {planted / HTTP_TOKEN_FILE}; write {planted / 'tasks.db'} x; "
        f"write {planted / 'secrets' / 'new'} x",
        asked,
    )
    results = recorder.of(ToolResultEvent)
    assert len(results) == 3
    assert all(not r.ok and "agentrt's own state" in r.preview for r in results)
    assert asked == []
    assert not (planted / "secrets" / "new").exists()
    assert TOKEN not in repr(recorder.events)


@pytest.mark.parametrize(
    "command",
    [
        "cat {state}/secrets/openai_api_key",
        "cat {work}/../state/secrets/*",
        "cat ~/../../{state}/http-token",
        "sqlite3 {state}/tasks.db .dump",
        "cd {state} && cat http-token",
    ],
)
async def test_shell_commands_naming_the_state_dir_are_refused_without_asking(
    runtime: Runtime, planted: Path, workdir: Path, command: str
) -> None:
    asked: list[Entry] = []
    text = "sh " + command.format(state=planted, work=workdir)
    recorder = await asked_nothing_run(runtime, "cli-sh", text, asked)
    (result,) = recorder.of(ToolResultEvent)
    assert not result.ok
    assert "agentrt's own state" in result.preview
    assert asked == []


async def test_a_secret_value_that_reaches_a_tool_result_is_replaced_by_its_name(
    runtime: Runtime, planted: Path, workdir: Path
) -> None:
    (workdir / "copy.txt").write_text(f"key={SECRET}\n")
    asked: list[Entry] = []
    recorder = await asked_nothing_run(runtime, "cli-copy", "read copy.txt; sh cat copy.txt", asked)
    # The two calls run side by side, each in a process of its own: either may end first.
    previews = {r.name: r.preview for r in recorder.of(ToolResultEvent)}
    assert previews["read_file"] == "key=[secret openai_api_key]\n"
    assert previews["shell"].startswith("key=[secret openai_api_key]")
    persisted = await everything_persisted(runtime, "cli-copy")
    assert "[secret openai_api_key]" in persisted
    assert SECRET not in persisted
    assert SECRET not in repr(recorder.events)


async def test_streamed_text_never_shows_a_stored_secret(runtime: Runtime, planted: Path) -> None:
    recorder = Recorder()
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(
            "cli-echo", f"the key is {TOKEN}", owner="t", emit=recorder
        )
    assert ended.outcome is Outcome.FINISHED
    assert TOKEN not in "".join(e.text for e in recorder.of(TextEvent))
    assert "[secret http-token]" in recorder.text()
    assert ended.text is not None
    assert TOKEN not in ended.text


@pytest.mark.parametrize(
    "spelling",
    ["{restricted}/f", "{parent}/./restricted/f", "{work}/../restricted/f", "{work}/link/f"],
)
async def test_restricted_paths_in_shell_commands_are_resolved_before_the_check(
    runtime: Runtime, tmp_path: Path, workdir: Path, spelling: str
) -> None:
    restricted = tmp_path / "restricted"
    restricted.mkdir()
    (restricted / "f").write_text("x")
    (workdir / "link").symlink_to(restricted)
    command = "cat " + spelling.format(restricted=restricted, parent=tmp_path, work=workdir)
    asked: list[Entry] = []
    await asked_nothing_run(runtime, "cli-res", f"sh {command}", asked)
    # No password is typed here, so it is asked for until the tries run out.
    assert asked
    assert {e.request.kind for e in asked} == {RequestKind.PASSWORD}


def test_mentioned_paths_expand_variables_home_and_globs(tmp_path: Path) -> None:
    (tmp_path / "abc").mkdir()
    os.environ["AGENTRT_TEST_DIR"] = str(tmp_path)
    try:
        found = mentioned_paths("cat $AGENTRT_TEST_DIR/x; ls a*; echo plain", tmp_path)
    finally:
        del os.environ["AGENTRT_TEST_DIR"]
    assert tmp_path / "x" in found
    assert tmp_path / "abc" in found
    assert command_touches("echo plain words", tmp_path, [tmp_path / "abc"]) is None


def test_redactor_notices_a_new_secret_and_skips_tiny_values(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    folder.mkdir()
    now = [0.0]
    redactor = Redactor(folder, clock=lambda: now[0])
    assert redactor.redact("nothing to hide") == "nothing to hide"
    # Written past the store (as by another process): seen once the recheck is due.
    (folder / "k").write_text("longvalue123")
    (folder / "tiny").write_text("ab")
    now[0] += redactor.recheck
    assert redactor.redact("x longvalue123 ab") == "x [secret k] ab"

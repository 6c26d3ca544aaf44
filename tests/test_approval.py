"""Approval policies: which tool calls run unasked, and what is asked under every policy.

``ask`` confirms every file write and command; ``auto-edit`` lets writes inside
the working folder run; ``full-auto`` lets writes and commands run. A restricted
path (the system password), agentrt's own configuration, a secret, and a call
that may already have run are asked about under every policy; the agent's own
state is refused outright.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from agentrt import ALLOW_ONCE
from agentrt import DENY
from agentrt import Answer
from agentrt import Cause
from agentrt import Entry
from agentrt import Outcome
from agentrt import RequestKind
from agentrt import Runtime
from agentrt import TaskStarted
from agentrt import ToolCallEvent
from agentrt import ToolResultEvent
from agentrt.agent.seccomp import OPEN_PROGRAM
from agentrt.config.settings import load_settings
from agentrt.core.policy import Command
from agentrt.core.policy import Edit
from agentrt.core.policy import auto_approves
from agentrt.vocab.terms import Approval

from .conftest import FakeVerifier
from .conftest import Recorder
from .conftest import run_answering
from .conftest import runtime_in

LIMIT = 10
ALLOW = Answer(ALLOW_ONCE)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "xdg" / "agentrt" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('approval = "ask"\n')
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


@asynccontextmanager
async def open_with(
    approval: str, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> AsyncIterator[Runtime]:
    """A runtime whose approval policy and own configuration come from the settings."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    settings = load_settings(argparse.Namespace(approval=approval), env)
    async with runtime_in(tmp_path, workdir, verifier, settings=settings) as rt:
        yield rt


@pytest.fixture
def under(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier, config_file: Path
) -> Callable[[str], AbstractAsyncContextManager[Runtime]]:
    """Opens a runtime under the approval policy it is given, the configuration file in place."""
    return lambda approval: open_with(approval, tmp_path, workdir, verifier)


@pytest.fixture(params=[a.value for a in Approval])
async def any_policy(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    workdir: Path,
    verifier: FakeVerifier,
    config_file: Path,
) -> AsyncIterator[Runtime]:
    async with open_with(request.param, tmp_path, workdir, verifier) as rt:
        yield rt


async def run_recording(
    runtime: Runtime, text: str, answer: Answer = ALLOW
) -> tuple[list[Entry], Recorder]:
    """Run `text` in a terminal session, recording (and answering) every question."""
    asked: list[Entry] = []

    async def give(entry: Entry) -> Answer:
        asked.append(entry)
        kind = entry.request.kind
        if kind is RequestKind.PASSWORD:
            return Answer(ALLOW_ONCE, secret="hunter2")
        if kind is RequestKind.SECRET:
            return Answer("", secret="s3cr3t-value")
        return answer

    ended, recorder = await run_answering(runtime, "cli-ap", text, give, LIMIT)
    assert ended.outcome is Outcome.FINISHED, ended
    return asked, recorder


WHAT_IS_ASKED = {
    # (policy, what runs): is a confirmation asked?
    ("ask", "write in workdir"): True,
    ("ask", "command"): True,
    ("auto-edit", "write in workdir"): False,
    ("auto-edit", "command"): True,
    ("full-auto", "write in workdir"): False,
    ("full-auto", "command"): False,
}


@pytest.mark.parametrize(("policy", "what"), sorted(WHAT_IS_ASKED))
async def test_each_policy_asks_for_what_it_should(
    policy: str,
    what: str,
    workdir: Path,
    outside: Path,
    under: Callable[[str], AbstractAsyncContextManager[Runtime]],
) -> None:
    statement = {
        "write in workdir": "write notes/a.txt hi",
        "command": "sh echo ran > c.txt",
    }[what]
    async with under(policy) as rt:
        asked, recorder = await run_recording(rt, statement)
    expected = WHAT_IS_ASKED[policy, what]
    assert [e.request.kind for e in asked] == ([RequestKind.CONFIRM] if expected else [])
    [result] = recorder.of(ToolResultEvent)
    assert result.ok, result
    done = {
        "write in workdir": workdir / "notes" / "a.txt",
        "command": workdir / "c.txt",
    }[what]
    assert done.exists()


@pytest.mark.parametrize("policy", [a.value for a in Approval])
async def test_edit_file_is_asked_about_exactly_as_write_file(
    policy: str,
    workdir: Path,
    outside: Path,
    under: Callable[[str], AbstractAsyncContextManager[Runtime]],
) -> None:
    (workdir / "a.txt").write_text("one\n")
    (outside / "b.txt").write_text("one\n")
    async with under(policy) as rt:
        asked, _ = await run_recording(rt, "edit a.txt one two")
        elsewhere, recorder = await run_recording(rt, f"edit {outside}/b.txt one two")
    expected = WHAT_IS_ASKED[policy, "write in workdir"]
    assert [e.request.kind for e in asked] == ([RequestKind.CONFIRM] if expected else [])
    assert (workdir / "a.txt").read_text() == "two\n"
    # Outside the working folder it is refused before anything is asked, as write_file is.
    assert elsewhere == []
    [result] = recorder.of(ToolResultEvent)
    assert not result.ok and "outside the working folder" in result.preview
    assert (outside / "b.txt").read_text() == "one\n"


async def test_the_tools_that_only_read_are_never_asked_about(any_policy: Runtime) -> None:
    workdir = any_policy.executor.config.workdir
    (workdir / "a.txt").write_text("needle\n")
    asked, recorder = await run_recording(
        any_policy, "read a.txt 1 1; ls; glob '*.txt'; grep needle"
    )
    assert asked == []
    results = recorder.of(ToolResultEvent)
    assert len(results) == 4 and all(r.ok for r in results)


@pytest.mark.parametrize("policy", [a.value for a in Approval])
async def test_nothing_writes_outside_the_working_folder_under_any_policy(
    policy: str,
    outside: Path,
    under: Callable[[str], AbstractAsyncContextManager[Runtime]],
) -> None:
    async with under(policy) as rt:
        # write_file is refused before anything is asked: the sandbox would refuse it.
        asked, recorder = await run_recording(rt, f"write {outside}/b.txt hi")
        assert asked == []
        [result] = recorder.of(ToolResultEvent)
        assert not result.ok
        assert "outside the working folder" in result.preview
        # A command is asked about as the policy says, and the kernel then refuses it.
        asked, _ = await run_recording(rt, f"sh echo ran > {outside}/c.txt")
        history = await rt.store.load_history("cli-ap")
    assert len(asked) == (0 if policy == "full-auto" else 1)
    assert not (outside / "b.txt").exists()
    assert not (outside / "c.txt").exists()
    # The host's /tmp (where the test's folders are) is not the sandbox's private one.
    assert "Directory nonexistent" in history[-2].content
    assert f"[sandbox: {outside / 'c.txt'} is not there for tools" in history[-2].content


async def test_a_denied_confirmation_still_stops_the_call_under_auto_edit(
    outside: Path, under: Callable[[str], AbstractAsyncContextManager[Runtime]]
) -> None:
    async with under("auto-edit") as rt:
        asked, recorder = await run_recording(rt, f"sh touch {outside}/x", Answer(DENY))
    assert len(asked) == 1
    assert not (outside / "x").exists()
    [result] = recorder.of(ToolResultEvent)
    assert "denied by the user" in result.preview


async def test_a_restricted_path_needs_the_password_under_every_policy(
    any_policy: Runtime, tmp_path: Path, verifier: FakeVerifier
) -> None:
    (tmp_path / "restricted").mkdir()
    asked, _ = await run_recording(any_policy, f"write {tmp_path}/restricted/x.conf on")
    assert [e.request.kind for e in asked] == [RequestKind.PASSWORD]
    assert verifier.verified == [True]
    # Through sudo, in the sandbox, with exactly the confirmed restricted root writable.
    [argv] = verifier.commands
    root = str(tmp_path / "restricted")
    # Without the network, so with the seccomp program opened for bubblewrap first.
    assert argv[:3] == ["sh", "-c", OPEN_PROGRAM] and argv[3].startswith("/proc/")
    assert argv[4].endswith("bwrap") and argv[-1] == str(tmp_path / "restricted" / "x.conf")
    assert argv[argv.index("--seccomp") + 1] == "3"
    assert [argv[i : i + 3] for i, a in enumerate(argv) if a == "--bind"] == [
        ["--bind", str(tmp_path / "work"), str(tmp_path / "work")],
        ["--bind", root, root],
    ]
    assert (tmp_path / "restricted" / "x.conf").read_text() == "on"


async def test_a_restricted_edit_shows_its_diff_with_the_password_question(
    any_policy: Runtime, tmp_path: Path, verifier: FakeVerifier
) -> None:
    target = tmp_path / "restricted" / "x.conf"
    target.parent.mkdir()
    target.write_text("mode = on\n")
    asked, recorder = await run_recording(any_policy, f"edit {target} on off")
    [entry] = asked
    assert entry.request.kind is RequestKind.PASSWORD
    assert entry.request.prompt == (
        f"edit {target} (1 replacement) (cannot be undone: a restricted path is written "
        "through sudo, and not checkpointed) (restricted)"
    )
    assert entry.request.diff == (
        f"--- a/{target}\n+++ b/{target}\n@@ -1 +1 @@\n-mode = on\n+mode = off"
    )
    [result] = recorder.of(ToolResultEvent)
    assert result.preview == f"edited {target}: 1 replacement (via sudo)"
    # Through sudo, with the digest of what it read: the writer checks it is still there.
    [argv] = verifier.commands
    assert argv[-2] == str(target) and len(argv[-1]) == 64
    assert target.read_text() == "mode = off\n"


async def test_a_restricted_command_says_it_cannot_be_undone_and_an_undo_names_it(
    any_policy: Runtime, tmp_path: Path, verifier: FakeVerifier
) -> None:
    target = tmp_path / "restricted" / "x.conf"
    target.parent.mkdir()
    asked, _ = await run_recording(any_policy, f"sh echo on > {target}")
    [entry] = asked
    assert entry.request.kind is RequestKind.PASSWORD
    assert entry.request.prompt == (
        f"run (restricted): echo on > {target} (cannot be undone: it runs through sudo, "
        "and its changes are not checkpointed)"
    )
    assert target.read_text() == "on\n"
    result = await any_policy.executor.undo("cli-ap")
    assert list(result.skipped.values()) == [
        "it runs through sudo, and its changes are not checkpointed"
    ]
    assert target.read_text() == "on\n"


async def test_agentrt_configuration_is_out_of_reach_under_every_policy(
    any_policy: Runtime, config_file: Path
) -> None:
    asked, recorder = await run_recording(any_policy, f'write {config_file} approval = "full-auto"')
    assert asked == []
    [result] = recorder.of(ToolResultEvent)
    assert not result.ok and "refused" in result.preview
    assert await trio.Path(config_file).read_text() == 'approval = "ask"\n'
    # A command naming it is still confirmed early, and then cannot see it.
    asked, _ = await run_recording(any_policy, f"sh cat {config_file.parent}/config.toml")
    assert [e.request.kind for e in asked] == [RequestKind.CONFIRM]
    history = await any_policy.store.load_history("cli-ap")
    assert "approval" not in history[-2].content
    assert "No such file or directory" in history[-2].content


async def test_the_agent_state_is_refused_and_a_secret_is_asked_under_every_policy(
    any_policy: Runtime,
) -> None:
    target = any_policy.state_dir / "keys" / "OPENAI_API_KEY"
    asked, recorder = await run_recording(any_policy, f"write {target} stolen")
    assert asked == []
    [result] = recorder.of(ToolResultEvent)
    assert not result.ok and "agentrt's own state" in result.preview
    assert not target.exists()
    asked, _ = await run_recording(any_policy, "secret deploy_token")
    assert [e.request.kind for e in asked] == [RequestKind.SECRET]


async def test_a_call_that_may_already_have_run_is_asked_about_under_full_auto(
    tmp_path: Path, workdir: Path, verifier: FakeVerifier, config_file: Path
) -> None:
    fifo = workdir / "started"
    os.mkfifo(fifo)
    async with open_with("full-auto", tmp_path, workdir, verifier) as rt:
        recorder = Recorder()
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                ended = await rt.executor.run(
                    "cli-again", f"sh echo go > {fifo} && sleep 30", owner="t", emit=recorder
                )
                assert ended.cause is Cause.PAUSE and ended.pending_kept

            with trio.fail_after(LIMIT):
                nursery.start_soon(run)
                # The command is running (it wrote to the pipe): it ran without a question.
                await trio.to_thread.run_sync(fifo.read_text)
                [call] = recorder.of(ToolCallEvent)
                [started] = recorder.of(TaskStarted)
                rt.executor.cancel(started.task_hash, Cause.PAUSE)

        asked: list[Entry] = []
        again = Recorder()
        async with trio.open_nursery() as nursery:

            async def listen(task_status: trio.TaskStatus[None]) -> None:
                with rt.registry.listen("cli-") as listener:
                    task_status.started()
                    entry = await listener.claim()
                    asked.append(entry)
                    entry.answer(Answer(DENY))

            await nursery.start(listen)
            with trio.fail_after(LIMIT):
                ended = await rt.executor.resume("cli-again", owner="t", emit=again)
        assert ended.outcome is Outcome.FINISHED
        [entry] = asked
        assert entry.request.kind is RequestKind.CONFIRM
        assert "may already have run (attempt 2)" in entry.request.prompt
        [rerun] = again.of(ToolCallEvent)
        assert (rerun.call_id, rerun.attempt) == (call.call_id, 2)


def test_auto_approves_is_the_table(tmp_path: Path) -> None:
    work, config = tmp_path / "work", tmp_path / "config"
    inside, elsewhere, own = work / "a.txt", tmp_path / "b.txt", config / "config.toml"
    table = {
        Approval.ASK: (False, False, False, False),
        Approval.AUTO_EDIT: (True, False, False, False),
        Approval.FULL_AUTO: (True, True, True, False),
    }
    for approval, expected in table.items():
        got = (
            auto_approves(approval, Edit(inside), workdir=work, guarded=[config]),
            auto_approves(approval, Edit(elsewhere), workdir=work, guarded=[config]),
            auto_approves(approval, Command("make test"), workdir=work, guarded=[config]),
            auto_approves(approval, Edit(own), workdir=work, guarded=[config])
            or auto_approves(approval, Command(f"rm {own}"), workdir=work, guarded=[config]),
        )
        assert got == expected, approval

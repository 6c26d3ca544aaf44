"""The headless `agentrt` command, run as a real process.

Every test runs twice: with no daemon (the command works on the store itself)
and with a daemon holding the state dir (the command goes through it). The
output and the exit status must be the same.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest
import trio

from agentrt import Cause
from agentrt import Outcome
from agentrt import TaskRecord
from agentrt import TaskStatus
from agentrt import TaskStore
from agentrt.apps.cli import exit_status
from agentrt.protocol.frames import LIST_PAGE_MAX
from agentrt.protocol.frames import EndedFrame

from .cli_process import AGENTRT
from .cli_process import env_for
from .cli_process import run
from .cli_process import run_in
from .conftest import fill_mixed_store
from .conftest import insert_unreadable_record
from .test_resume_preview import call_json


def test_run_answers_a_confirmation_on_stdin(state: Path, tmp_path: Path) -> None:
    done = run(["run", "hi; write a.txt hey"], state, tmp_path, stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.txt").read_text() == "hey"
    assert "answer y (allow once), a (allow for this session) or n (deny)" in done.stderr


def test_run_shows_the_diff_of_an_edit_as_plain_text_before_asking(
    state: Path, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    done = run(["run", "edit a.txt two 2"], state, tmp_path, stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.txt").read_text() == "one\n2\n"
    asked = (
        f"· ? edit {tmp_path / 'a.txt'} (1 replacement)\n"
        "  --- a/a.txt\n  +++ b/a.txt\n  @@ -1,2 +1,2 @@\n   one\n  -two\n  +2\n"
        "  answer y (allow once), a (allow for this session) or n (deny)\n"
    )
    assert asked in done.stderr
    assert "\x1b" not in done.stderr


def test_run_answers_a_question_on_stdin(state: Path, tmp_path: Path) -> None:
    done = run(["run", "ask Colour?"], state, tmp_path, stdin="blue\n")
    assert done.returncode == 0, done.stderr
    assert "You answered: blue" in done.stdout
    assert "? Colour?" in done.stderr


def test_a_denied_confirmation_goes_back_to_the_model(state: Path, tmp_path: Path) -> None:
    done = run(["run", "write a.txt hey"], state, tmp_path, stdin="n\n")
    assert done.returncode == 0
    assert not (tmp_path / "a.txt").exists()
    assert "write_file: denied by the user" in done.stdout


def test_json_mode_prints_one_event_per_line(state: Path, tmp_path: Path) -> None:
    done = run(["run", "--json", "stream 3"], state, tmp_path)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[0]["type"] == "task_started"
    assert events[-1]["type"] == "run_ended"
    assert events[-1]["outcome"] == "finished"
    assert {e["task_hash"] for e in events} == {events[0]["task_hash"]}


def test_json_mode_prints_events_and_questions_as_the_http_api_does(
    state: Path, tmp_path: Path
) -> None:
    done = run(["run", "--json", "--session", "cli-j", "write a.txt hey"], state, tmp_path, "y\n")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    types = [e["type"] for e in lines]
    assert types[0] == "task_started" and types[-1] == "run_ended"
    assert {e["session_id"] for e in lines} == {"cli-j"}
    [question] = [e for e in lines if e["type"] == "question"]
    assert set(question) == {
        *("v", "type", "id", "session_id", "task_hash", "agent", "kind", "prompt", "choices"),
        *("masked", "tool", "error", "diff"),
    }
    assert (question["kind"], question["tool"]) == ("confirm", "write_file")
    assert question["diff"] == (
        "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hey\n\\ No newline at end of file"
    )
    assert lines[-1]["summary"] == "finished"


def test_a_chat_session_parks_its_question_and_pending_answer_resumes(
    state: Path, tmp_path: Path
) -> None:
    parked = run(["run", "--session", "chat-7", "ask Name?"], state, tmp_path)
    assert parked.returncode == 3
    assert "agentrt pending answer chat-7" in parked.stderr
    listed = run(["pending", "list", "--json"], state, tmp_path)
    [task] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert task["status"] == "awaiting_answer"
    assert task["question"] == "Name?"
    answered = run(["pending", "answer", "chat-7", "Ada"], state, tmp_path)
    assert answered.returncode == 0
    assert "You answered: Ada" in answered.stdout
    assert run(["pending", "list"], state, tmp_path).stdout == "no pending tasks\n"


def test_pending_show_and_discard(state: Path, tmp_path: Path) -> None:
    run(["run", "--session", "dc-1", "read nothing; ask Q?"], state, tmp_path)
    shown = run(["pending", "show", "dc-1", "--json"], state, tmp_path)
    detail = json.loads(shown.stdout)
    assert detail["session"] == "dc-1"
    assert any(m["role"] == "tool" for m in detail["transcript"])
    assert run(["pending", "discard", "dc-1"], state, tmp_path).returncode == 0
    gone = run(["pending", "discard", "dc-1"], state, tmp_path)
    assert gone.returncode == 1
    assert "session dc-1 has no pending task" in gone.stderr


def test_pending_show_says_what_a_resume_will_do_as_text_and_json(
    state: Path, tmp_path: Path
) -> None:
    parked = run(["run", "--session", "chat-pv", "read nothing; ask Colour?"], state, tmp_path)
    assert parked.returncode == 3, parked.stderr
    preview = [
        "resume will keep 1 call (its result is saved, it does not run again)",
        'asked again: "Colour?"',
    ]
    shown = run(["pending", "show", "chat-pv"], state, tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("chat-pv ") and lines[0].endswith("  asks: Colour?")
    assert "> read nothing; ask Colour?" in lines
    assert lines[-5:] == [
        "",
        *preview,
        "answer with: agentrt pending answer chat-pv 'TEXT'",
        "resume with: agentrt pending resume chat-pv",
    ]
    as_json = run(["pending", "show", "--json", "chat-pv"], state, tmp_path)
    detail = json.loads(as_json.stdout)
    assert detail["preview"] == {
        "stop": None,
        "kept": [call_json("call_1_0", "read_file")],
        "to_run": [],
        "reissue": [],
        "questions": ["Colour?"],
        "regenerated_words": 0,
        "lines": preview,
    }


def test_bad_input_gets_a_clear_error(state: Path, tmp_path: Path) -> None:
    unknown = run(["pending", "resume", "cli-none"], state, tmp_path)
    assert unknown.returncode == 1
    assert unknown.stderr == "agentrt: session cli-none has no pending task\n"
    bad_model = run(["run", "--model", "gpt", "hi"], state, tmp_path)
    assert bad_model.returncode == 2
    assert "unknown model 'gpt'" in bad_model.stderr
    bad_session = run(["run", "--session", "a b", "hi"], state, tmp_path)
    assert bad_session.returncode == 2
    assert "must be printable and contain no spaces" in bad_session.stderr


def test_help_explains_exit_statuses() -> None:
    done = subprocess.run([*AGENTRT, "--help"], capture_output=True, text=True, check=True)
    assert "130 cancelled by the user" in " ".join(done.stdout.split())
    assert "141 when the reader of its output went away" in " ".join(done.stdout.split())
    sub = subprocess.run([*AGENTRT, "run", "--help"], capture_output=True, text=True, check=True)
    assert "SIGTERM pauses" in " ".join(sub.stdout.split())


def test_a_reader_that_went_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """`agentrt config show | head -1`: no traceback, the status SIGPIPE would give."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the command writes a byte: every write fails
    try:
        done = subprocess.run(
            [*AGENTRT, "config", "show"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env_for(tmp_path / "state"),
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.stderr.decode() == ""
    assert done.returncode == 128 + signal.SIGPIPE


@pytest.mark.parametrize(
    ("outcome", "cause", "kept", "status"),
    [
        (Outcome.FINISHED, None, False, 0),
        (Outcome.FAILED, None, True, 1),
        # A user-cancel whose task could not be deleted ends failed, not cancelled.
        (Outcome.FAILED, None, False, 1),
        (Outcome.CANCELLED, Cause.USER_CANCEL, False, 130),
        (Outcome.CANCELLED, Cause.PAUSE, True, 3),
        (Outcome.CANCELLED, Cause.DISCONNECT, True, 3),
        (Outcome.CANCELLED, Cause.SHUTDOWN, True, 3),
        (Outcome.AWAITING_ANSWER, None, True, 3),
    ],
)
def test_the_exit_status_says_the_ending_by_its_outcome_and_cause(
    outcome: Outcome, cause: Cause | None, kept: bool, status: int
) -> None:
    assert exit_status(EndedFrame("t", "cli-s", outcome, cause, pending_kept=kept)) == status


async def _signal_run(
    state: Path, cwd: Path, sig: signal.Signals
) -> tuple[int, list[dict[str, object]]]:
    proc = await trio.lowlevel.open_process(
        [*AGENTRT, "run", "--json", "--session", "cli-sig", "big 4; sleep 600"],
        stdout=subprocess.PIPE,
        env=env_for(state),
        cwd=cwd,
    )
    assert proc.stdout is not None
    events: list[dict[str, object]] = []
    buffer = b""
    with trio.fail_after(30):
        # Signal once the sleep tool is running and big's result is committed.
        while not any(e.get("type") == "tool_result" for e in events):
            chunk = await proc.stdout.receive_some()
            assert chunk, "agentrt exited early"
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            events += [json.loads(line) for line in lines if line]
        proc.send_signal(sig)
        while chunk := await proc.stdout.receive_some():
            buffer += chunk
        events += [json.loads(line) for line in buffer.split(b"\n") if line]
        code = await proc.wait()
    return code, events


async def test_sigterm_pauses_and_keeps_the_pending_task(state: Path, tmp_path: Path) -> None:
    code, events = await _signal_run(state, tmp_path, signal.SIGTERM)
    assert code == 3
    assert events[-1]["cause"] == "pause"
    listed = run(["pending", "list", "--json"], state, tmp_path)
    [task] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (task["status"], task["cause"]) == ("interrupted", "pause")


async def test_sighup_disconnects_and_keeps_the_pending_task(state: Path, tmp_path: Path) -> None:
    code, events = await _signal_run(state, tmp_path, signal.SIGHUP)
    assert code == 3
    assert events[-1]["cause"] == "disconnect"


async def test_ctrl_c_is_a_user_cancel_and_deletes_the_task(state: Path, tmp_path: Path) -> None:
    code, events = await _signal_run(state, tmp_path, signal.SIGINT)
    assert code == 130
    assert events[-1]["cause"] == "user_cancel"
    assert run(["pending", "list"], state, tmp_path).stdout == "no pending tasks\n"


def test_stdin_closing_while_a_question_waits_keeps_the_task_with_the_question(
    state: Path, tmp_path: Path
) -> None:
    done = run(["run", "--session", "cli-eof", "write a.txt hey"], state, tmp_path)
    assert done.returncode == 3, done.stderr
    assert "standard input closed while a question waited for its answer" in done.stderr
    assert "waiting for your answer: write 3 bytes to" in done.stderr
    assert not (tmp_path / "a.txt").exists()
    resumed = run(["pending", "resume", "cli-eof"], state, tmp_path, stdin="y\n")
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "a.txt").read_text() == "hey"


def test_an_unreadable_task_is_listed_and_can_be_discarded(state: Path, tmp_path: Path) -> None:
    assert run(["run", "--session", "chat-ok", "ask Name?"], state, tmp_path).returncode == 3
    insert_unreadable_record(state / "tasks.db", "chat-bad")

    listed = run(["pending", "list"], state, tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2
    [bad] = [line for line in lines if line.startswith("chat-bad")]
    assert "unreadable" in bad
    assert "discard it with: agentrt pending discard chat-bad" in bad
    as_json = run(["pending", "list", "--json"], state, tmp_path)
    statuses = {t["session"]: t["status"] for t in map(json.loads, as_json.stdout.splitlines())}
    assert statuses == {"chat-ok": "awaiting_answer", "chat-bad": "unreadable"}

    shown = run(["pending", "show", "chat-bad"], state, tmp_path)
    assert shown.returncode == 1
    assert "is unreadable" in shown.stderr
    assert "discard it with: agentrt pending discard chat-bad" in shown.stderr

    discarded = run(["pending", "discard", "chat-bad"], state, tmp_path)
    assert discarded.returncode == 0, discarded.stderr
    assert discarded.stdout == "discarded the pending task of chat-bad\n"
    left = run(["pending", "list", "--json"], state, tmp_path).stdout.splitlines()
    assert [json.loads(line)["session"] for line in left] == ["chat-ok"]


def test_a_listing_of_more_than_a_page_shows_every_task_once(state: Path, tmp_path: Path) -> None:
    count = LIST_PAGE_MAX + 5  # two pages through the daemon

    async def fill() -> None:
        store = await TaskStore.open(state / "tasks.db")
        try:
            async with trio.open_nursery() as nursery:
                for n in range(count):
                    record = TaskRecord(
                        f"cli-{n:04}",
                        f"task {n}",
                        (),
                        status=TaskStatus.INTERRUPTED,
                        updated_at=1_700_000_000.0 + n,
                    )
                    nursery.start_soon(store.save, record)
        finally:
            await store.aclose()

    trio.run(fill)
    newest_first = [f"cli-{n:04}" for n in reversed(range(count))]
    listed = run(["pending", "list", "--json"], state, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["session"] for line in listed.stdout.splitlines()] == newest_first
    plain = run(["pending", "list"], state, tmp_path)
    assert [line.split()[0] for line in plain.stdout.splitlines()] == newest_first
    sessions = run(["sessions", "list", "--json"], state, tmp_path)
    assert sessions.returncode == 0, sessions.stderr
    shown = [json.loads(line)["session"] for line in sessions.stdout.splitlines()]
    assert sorted(shown) == sorted(newest_first)
    some = run(["sessions", "list", "--json", "--limit", str(count - 2)], state, tmp_path)
    assert len(some.stdout.splitlines()) == count - 2


def test_the_listing_shows_times_in_the_commands_own_time_zone(state: Path, tmp_path: Path) -> None:
    """Through a daemon too: it sends each line's second, and the command writes the time."""

    async def fill() -> None:
        store = await TaskStore.open(state / "tasks.db")
        try:
            paused = TaskRecord(
                "cli-zone", "a task", (), status=TaskStatus.INTERRUPTED, cause=Cause.PAUSE
            )
            await store.save(attrs.evolve(paused, updated_at=1_700_000_000.5))
        finally:
            await store.aclose()

    trio.run(fill)
    # A zone of its own (POSIX form: 5.5 hours east of UTC), whatever the daemon's.
    listed = run_in(["pending", "list"], {**env_for(state), "TZ": "XYZ-5:30"}, tmp_path)
    assert listed.returncode == 0, listed.stderr
    shown = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1_700_000_000 + 5 * 3600 + 1800))
    assert listed.stdout == f"cli-zone             interrupted (pause)          {shown}  a task\n"


def test_the_listing_shows_each_kind_of_task_in_one_line(state: Path, tmp_path: Path) -> None:
    async def fill() -> None:
        store = await TaskStore.open(state / "tasks.db")
        try:
            await fill_mixed_store(store, base=1_700_000_000.0)
        finally:
            await store.aclose()

    trio.run(fill)  # this process stays alive: its running task is not crashed
    at = [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1_700_000_000 - n)) for n in range(11)]
    epoch = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(0))
    listed = run(["pending", "list"], state, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        f"cli-paused           interrupted (pause)          {at[0]}  a task",
        f"cli-crashed          crashed (shutdown)           {at[1]}  working",
        f"cli-nobody           crashed                      {at[2]}  working",
        f"cli-running          running                      {at[3]}  working",
        f"cli-asks             awaiting_answer              {at[4]}  "
        "asks: Which colour is the sky on a clear day, at noon, in...",
        f"cli-failed           failed                       {at[5]}  try",
        f"cli-long             interrupted (disconnect)     {at[6]}  {'y' * 57}...",
        f'cli-quoted           interrupted                  {at[7]}  say "hi" \\ then\tbye, é',
        *(
            f"cli-{name:<16} unreadable                   {at[n]}  "
            f"cannot be read; discard it with: agentrt pending discard cli-{name}"
            for n, name in ((8, "status"), (9, "cause"), (10, "typed"))
        ),
        f"cli-bad              unreadable                   {epoch}  "
        "cannot be read; discard it with: agentrt pending discard cli-bad",
    ]
    as_json = run(["pending", "list", "--json"], state, tmp_path)
    assert [json.loads(line)["session"] for line in as_json.stdout.splitlines()] == [
        line.split()[0] for line in listed.stdout.splitlines()
    ]


def test_a_lost_store_stops_the_command_and_says_what_to_do(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert run(["run", "--session", "chat-1", "ask Name?"], state, tmp_path).returncode == 3
    (state / "tasks.db").write_bytes(b"")
    listed = run(["pending", "list"], state, tmp_path)
    assert listed.returncode == 1
    assert listed.stdout == ""
    assert "pending tasks and history are lost" in listed.stderr
    assert f"delete {state / 'tasks.db.created'}" in listed.stderr
    assert (state / "tasks.db").read_bytes() == b""
    started = subprocess.run(
        [*AGENTRT, "daemon", "--socket", str(tmp_path / "d.sock"), "--state-dir", str(state)],
        capture_output=True,
        text=True,
        env=env_for(state),
        timeout=60,
        check=False,
    )
    assert started.returncode == 1
    assert "pending tasks and history are lost" in started.stderr


@pytest.mark.parametrize("command", ["console script", "python -m"])
def test_output_larger_than_a_pipe_is_whole_before_the_quick_exit(
    command: str, tmp_path: Path
) -> None:
    """The command exits without the interpreter's teardown, after its output is all written."""
    from agentrt.core.cause import Cause
    from agentrt.store.record import TaskRecord
    from agentrt.store.sqlite import TaskStore
    from agentrt.vocab.terms import TaskStatus

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    count = 3000  # some 300 KB of listing: several times what a pipe holds

    async def fill() -> None:
        store = await TaskStore.open(state / "tasks.db")
        try:
            for number in range(count):
                text = f"task {number} " + "x" * 60
                await store.save(
                    TaskRecord(
                        f"cli-{number:08x}",
                        text,
                        (),
                        status=TaskStatus.INTERRUPTED,
                        cause=Cause.PAUSE,
                        task_hash=f"{number:012x}",
                    )
                )
        finally:
            await store.aclose()

    trio.run(fill)
    program = (
        [str(Path(sys.executable).with_name("agentrt"))] if command == "console script" else AGENTRT
    )
    done = run(["pending", "list"], state, tmp_path, program=program)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == count
    assert {line.split()[0] for line in lines} == {f"cli-{n:08x}" for n in range(count)}
    assert done.stderr == ""


def test_a_listing_reads_the_store_alone(tmp_path: Path) -> None:
    # `pending list`, `pending show`, `sessions list` and `sessions show` only read the store:
    # they probe no bubblewrap and start no MCP server, which `agentrt run` does (the control
    # below).
    probed = tmp_path / "probed"
    bwrap = tmp_path / "bwrap"
    bwrap.write_text(f'#!/bin/sh\necho "$@" >> {probed}\nexit 1\n')
    bwrap.chmod(0o755)
    config = tmp_path / "config"
    (config / "agentrt").mkdir(parents=True)
    (config / "agentrt" / "config.toml").write_text(
        '[mcp.servers.never]\ncommand = "/bin/true"\ntrust = true\n'
    )
    state = tmp_path / "state"
    env = {**env_for(state), "AGENTRT_BWRAP": str(bwrap), "XDG_CONFIG_HOME": str(config)}
    for args in (["pending", "list"], ["pending", "list", "--json"], ["sessions", "list"]):
        done = run_in(args, env, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "no sandbox" not in done.stderr
    shown = run_in(["pending", "show", "cli-none"], env, tmp_path)
    assert "no pending task" in shown.stdout + shown.stderr
    assert not probed.exists()
    assert not (state / "mcp").exists()
    # The same environment does probe and start servers for a run: the checks above can fail.
    ran = run_in(["run", "--session", "cli-told", "hello"], env, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert probed.exists() and (state / "mcp").is_dir()
    assert "no sandbox for tools" in ran.stderr
    probed.unlink()
    told = run_in(["sessions", "show", "cli-told"], env, tmp_path)
    assert told.returncode == 0, told.stderr
    assert "hello" in told.stdout
    assert not probed.exists()

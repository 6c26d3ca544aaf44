"""`agentrt sessions list|show|continue|rm`, run as a real process, with and without a daemon.

The `state` fixture runs every test twice: on the store itself, and through a
daemon holding the state dir. Output and exit status must be the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import trio

from .cli_process import run
from .fakes.llm_server import LLMServer
from .fakes.llm_server import sse
from .test_configured_entry_points import reply


def test_list_show_and_continue_yesterdays_conversation(
    state: Path,
    tmp_path: Path,
) -> None:
    for args in (["--session", "cli-talk", "hello there"], ["--session", "cli-other", "hi"]):
        assert run(["run", *args], state, tmp_path).returncode == 0
    listed = run(["sessions", "list"], state, tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["cli-other", "cli-talk"]
    assert "2 messages  hello there" in lines[1]

    as_json = run(["sessions", "list", "--json", "--limit", "1"], state, tmp_path)
    [only] = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert only["session"] == "cli-other"
    assert (only["title"], only["messages"], only["status"]) == ("hi", 2, None)
    assert only["created_at"] <= only["updated_at"]

    went_on = run(["sessions", "continue", "cli-talk", "and again"], state, tmp_path)
    assert went_on.returncode == 0, went_on.stderr
    assert "and again" in went_on.stdout
    shown = run(["sessions", "show", "cli-talk"], state, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("session cli-talk: hello there\n4 messages, started ")
    assert "\n> hello there\n" in shown.stdout and "\n> and again\n" in shown.stdout
    assert "continue it with: agentrt sessions continue cli-talk 'TEXT'" in shown.stdout

    shown_json = run(["sessions", "show", "--json", "cli-talk"], state, tmp_path)
    data = json.loads(shown_json.stdout)
    assert data["session"]["messages"] == 4
    assert [(m["seq"], m["role"]) for m in data["messages"]] == [
        (0, "user"),
        (1, "assistant"),
        (2, "user"),
        (3, "assistant"),
    ]
    assert data["messages"][2]["content"] == "and again"
    assert "tool_calls" not in data["messages"][0]


def test_continue_reads_the_message_from_stdin_and_keeps_tool_calls(
    state: Path,
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("remember this")
    assert run(["run", "--session", "cli-r", "hi"], state, tmp_path).returncode == 0
    went_on = run(["sessions", "continue", "cli-r", "-"], state, tmp_path, "read notes.txt\n")
    assert went_on.returncode == 0, went_on.stderr
    data = json.loads(run(["sessions", "show", "--json", "cli-r"], state, tmp_path).stdout)
    call, result = data["messages"][3], data["messages"][4]
    assert call["tool_calls"][0]["name"] == "read_file"
    assert call["tool_calls"][0]["arguments"] == {"path": "notes.txt"}
    assert (result["role"], result["name"], result["content"]) == (
        "tool",
        "read_file",
        "remember this",
    )
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    text = run(["sessions", "show", "cli-r"], state, tmp_path).stdout
    assert '  * read_file {"path": "notes.txt"}' in text
    assert "  = read_file: remember this" in text


def test_rm_removes_a_finished_session_and_refuses_one_with_a_pending_task(
    state: Path,
    tmp_path: Path,
) -> None:
    assert run(["run", "--session", "cli-done", "hello"], state, tmp_path).returncode == 0
    # No answer on stdin: the run stops at its question and keeps its task.
    parked = run(["run", "--session", "cli-parked", "ask Colour?"], state, tmp_path)
    assert parked.returncode == 3, parked.stderr
    refused = run(["sessions", "rm", "cli-parked"], state, tmp_path)
    assert refused.returncode == 1
    assert "session cli-parked has a pending task" in refused.stderr
    assert "agentrt pending discard cli-parked" in refused.stderr
    listed = run(["sessions", "list"], state, tmp_path).stdout
    assert "[awaiting_answer]" in listed and "cli-parked" in listed
    removed = run(["sessions", "rm", "cli-done"], state, tmp_path)
    assert (removed.returncode, removed.stdout) == (0, "removed session cli-done\n")
    for args in (["show", "cli-done"], ["rm", "cli-done"], ["continue", "cli-done", "hi"]):
        gone = run(["sessions", *args], state, tmp_path)
        assert gone.returncode == 1, args
        assert "no session cli-done" in gone.stderr
    assert run(["sessions", "list", "--prefix", "cli-done"], state, tmp_path).stdout == (
        "no sessions\n"
    )


async def test_continue_gives_the_model_the_whole_conversation(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    folder = tmp_path / "state"
    done = await trio.to_thread.run_sync(
        lambda: run(["run", "--session", "cli-h", "my name is Ada"], folder, tmp_path)
    )
    assert done.returncode == 0, done.stderr
    server = LLMServer()
    await nursery.start(server.run)
    server.script(sse(reply("Your name is Ada.")))
    flags = ["--model", "openai:local", "--base-url", f"{server.base_url}/v1"]
    went_on = await trio.to_thread.run_sync(
        lambda: run(["sessions", "continue", *flags, "cli-h", "what is my name?"], folder, tmp_path)
    )
    assert went_on.returncode == 0, went_on.stderr
    assert "Your name is Ada." in went_on.stdout
    sent = server.requests[0].json()["messages"]
    said = [(m["role"], m.get("content")) for m in sent if m["role"] in ("user", "assistant")]
    assert said[0] == ("user", "my name is Ada")
    assert said[1][0] == "assistant"
    assert said[-1] == ("user", "what is my name?")


def test_undo_puts_back_the_last_runs_files_and_asks_about_a_conflict(
    state: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "a.txt").write_text("before\n")
    session = ["run", "--session", "cli-undo"]
    assert run([*session, "write a.txt first"], state, work, "y\n").returncode == 0
    assert run([*session, "write a.txt second; sh mkdir d"], state, work, "y\ny\n").returncode == 0
    turns = run(["sessions", "turns", "--json", "cli-undo"], state, work)
    assert turns.returncode == 0, turns.stderr
    listed = [json.loads(line) for line in turns.stdout.splitlines()]
    assert [(t["seq"], t["files"]) for t in listed] == [(0, 2), (4, 0)]

    undone = run(["sessions", "undo", "cli-undo"], state, work)
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout == f"put back 2 path(s):\n  {work / 'a.txt'}\n  {work / 'd'}\n"
    assert (work / "a.txt").read_text() == "first" and not (work / "d").exists()

    # The person changes the file: undoing the first run lists it and touches nothing.
    (work / "a.txt").write_text("mine\n")
    stopped = run(["sessions", "undo", "cli-undo"], state, work)
    assert stopped.returncode == 1
    assert stopped.stdout.startswith(
        f"1 file(s) changed since the run; nothing was undone:\n  {work / 'a.txt'}\n"
    )
    assert (work / "a.txt").read_text() == "mine\n"
    forced = run(["sessions", "undo", "--force", "cli-undo"], state, work)
    assert forced.returncode == 0, forced.stderr
    kept = work / "a.txt.agentrt-undo-1"
    assert f"(its newer content kept in {kept})" in forced.stdout
    assert (work / "a.txt").read_text() == "before\n" and kept.read_text() == "mine\n"

    bad = run(["sessions", "undo", "--turn", "1", "cli-undo"], state, work)
    assert bad.returncode == 2 and "has no turn at message 1" in bad.stderr


def test_compact_summarises_a_finished_session_and_show_says_so(
    state: Path,
    tmp_path: Path,
) -> None:
    for text in ("hello there", "and again", "once more"):
        went = run(["sessions", "continue", "cli-long", text], state, tmp_path)
        if went.returncode == 1 and "no session" in went.stderr:
            went = run(["run", "--session", "cli-long", text], state, tmp_path)
        assert went.returncode == 0, went.stderr
    compacted = run(["sessions", "compact", "cli-long"], state, tmp_path)
    assert compacted.returncode == 0, compacted.stderr
    # Every message but the model's last reply, which stays whole.
    assert compacted.stdout == "compacted session cli-long: 5 earlier messages summarised\n"
    shown = run(["sessions", "show", "cli-long"], state, tmp_path)
    assert "\n\n(5 earlier messages summarised)\n" in shown.stdout
    data = json.loads(run(["sessions", "show", "--json", "cli-long"], state, tmp_path).stdout)
    # Every message is kept; the summary is one more, a note that says what it stands for.
    assert [m["role"] for m in data["messages"]] == [*["user", "assistant"] * 3, "note"]
    assert data["messages"][-1]["summarised"] == 5
    assert "'hello there'" in data["messages"][-1]["content"]
    went_on = run(["sessions", "continue", "cli-long", "after it"], state, tmp_path)
    assert went_on.returncode == 0, went_on.stderr
    missing = run(["sessions", "compact", "cli-nothing"], state, tmp_path)
    assert missing.returncode == 1
    assert "no session cli-nothing" in missing.stderr


def test_show_prints_the_sessions_tokens_by_run(state: Path, tmp_path: Path) -> None:
    for text in ("hello there", "and again"):
        went = run(["sessions", "continue", "cli-tok", text], state, tmp_path)
        if went.returncode == 1 and "no session" in went.stderr:
            went = run(["run", "--session", "cli-tok", text], state, tmp_path)
        assert went.returncode == 0, went.stderr
    data = json.loads(run(["sessions", "show", "--json", "cli-tok"], state, tmp_path).stdout)
    usage = data["usage"]
    assert usage["rounds"] == 2
    assert usage["cost"] is None  # the scripted model has no price
    assert [r["model"] for r in usage["runs"]] == ["scripted", "scripted"]
    assert usage["input_tokens"] == sum(r["tokens"]["input_tokens"] for r in usage["runs"]) > 0
    shown = run(["sessions", "show", "cli-tok"], state, tmp_path).stdout
    total = (
        f"tokens: {usage['input_tokens']:,} in (0 cached), {usage['output_tokens']:,} out "
        "(0 reasoning) in 2 rounds of 2 runs; cost unknown"
    )
    assert f"\n{total}\n" in shown
    for one in usage["runs"]:
        assert f"  run {one['task_hash']} (scripted): " in shown

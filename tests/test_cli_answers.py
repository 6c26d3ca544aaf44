"""Answers piped to `agentrt run`: in the order the calls were issued, asked again when not
understood, and an end of input that keeps the task instead of denying.

Real processes with real pipes, each test with and without a daemon holding the
state dir: both must behave alike.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from agentrt import ALLOW_ONCE
from agentrt import Outcome
from agentrt import Runtime
from agentrt.agent.loop import AgentRun
from agentrt.vocab.questions import clock_time

from .cli_process import run
from .conftest import Recorder
from .test_integrity import answering

ASK_AGAIN = "(not an answer: 'blue'; answer y (allow once), a (allow for this session) or n (deny))"


def test_a_line_that_is_no_answer_is_asked_again_and_the_end_of_input_keeps_the_task(
    state: Path, tmp_path: Path
) -> None:
    # The write's confirmation comes first (its call was issued first): 'blue' is no answer
    # to it, so it is asked again and 'y' allows it; then input ends at "Colour?".
    done = run(
        ["run", "--session", "cli-b1", "write b.txt hi; ask Colour?"],
        state,
        tmp_path,
        stdin="blue\ny\n",
    )
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "b.txt").read_text() == "hi"
    err = done.stderr
    confirm = err.index("? write 2 bytes to")
    again = err.index(ASK_AGAIN)
    question = err.index("? Colour?")
    closed = err.index("standard input closed while a question waited for its answer")
    assert confirm < again < question < closed
    assert "waiting for your answer: Colour?" in err
    assert "denied" not in done.stdout + err
    listed = run(["pending", "list", "--json"], state, tmp_path)
    [task] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (task["session"], task["status"], task["question"]) == (
        "cli-b1",
        "awaiting_answer",
        "Colour?",
    )
    # The kept task asks the question again; the write is not run again.
    (tmp_path / "b.txt").write_text("kept")
    resumed = run(["pending", "resume", "cli-b1"], state, tmp_path, stdin="red\n")
    assert resumed.returncode == 0, resumed.stderr
    assert "You answered: red" in resumed.stdout
    assert (tmp_path / "b.txt").read_text() == "kept"


def test_answers_are_taken_in_the_order_the_calls_were_issued(state: Path, tmp_path: Path) -> None:
    # Eight calls of one round run at once; each line answers the call of its place. The
    # scheduler runs them in an order of its own: only issue order gets every line right.
    names = "abcd"
    message = "; ".join(f"write {n}.txt {i}; ask Q{i}?" for i, n in enumerate(names))
    answers = "".join(f"{'y' if i % 2 == 0 else 'n'}\nA{i}\n" for i in range(len(names)))
    done = run(["run", message], state, tmp_path, stdin=answers)
    assert done.returncode == 0, done.stderr
    asked = [line for line in done.stderr.splitlines() if line.startswith("· ? ")]
    expected = []
    for i, n in enumerate(names):
        expected += [f"· ? write 1 bytes to {tmp_path / n}.txt", f"· ? Q{i}?"]
    assert asked == expected
    for i, n in enumerate(names):
        if i % 2 == 0:
            assert (tmp_path / f"{n}.txt").read_text() == str(i)
        else:
            assert not (tmp_path / f"{n}.txt").exists()
    out = done.stdout
    assert [out.index(f"You answered: A{i}") for i in range(len(names))] == sorted(
        out.index(f"You answered: A{i}") for i in range(len(names))
    )
    assert out.count("write_file: denied by the user") == 2


def test_both_answered_in_order_finishes(state: Path, tmp_path: Path) -> None:
    done = run(["run", "write b.txt hi; ask Colour?"], state, tmp_path, stdin="blue\ny\nred\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "b.txt").read_text() == "hi"
    assert ASK_AGAIN in done.stderr
    assert "You answered: red" in done.stdout


def test_every_confirmation_word_is_understood_and_nothing_else(
    state: Path, tmp_path: Path
) -> None:
    # An empty line, a typo and a word of another question are asked again; 'YES' allows.
    done = run(["run", "write c.txt hi"], state, tmp_path, stdin="\nyess\nmaybe\nYES\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c.txt").read_text() == "hi"
    assert done.stderr.count("? write 2 bytes to") == 4
    for said in ("''", "'yess'", "'maybe'"):
        assert f"(not an answer: {said}; answer y (allow once)" in done.stderr
    denied = run(["run", "write d.txt hi"], state, tmp_path, stdin="No\n")
    assert denied.returncode == 0, denied.stderr
    assert not (tmp_path / "d.txt").exists()
    assert "write_file: denied by the user" in denied.stdout


def test_input_ending_at_the_first_confirmation_denies_nothing(state: Path, tmp_path: Path) -> None:
    done = run(["run", "--json", "--session", "cli-b2", "write e.txt hi"], state, tmp_path)
    assert done.returncode == 3, done.stderr
    assert not (tmp_path / "e.txt").exists()
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["type"] for e in events if e["type"] in ("question", "tool_result")] == ["question"]
    assert (events[-1]["type"], events[-1]["outcome"]) == ("run_ended", "awaiting_answer")
    resumed = run(["pending", "resume", "cli-b2"], state, tmp_path, stdin="y\n")
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "e.txt").read_text() == "hi"


async def test_a_later_call_that_reaches_its_question_first_waits_for_the_earlier_one(
    runtime: Runtime, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first call's way to its question is held until everything else is blocked: the
    # second call gets to its own question first, and still its question is posted second.
    asked = await answering(nursery, runtime, lambda e: ALLOW_ONCE)
    set_record = AgentRun.set_record

    async def first_one_late(run: AgentRun, **changes: Any) -> None:
        question = changes.get("question")
        if question is not None and question.prompt.endswith("one.txt"):
            await trio.testing.wait_all_tasks_blocked()
        await set_record(run, **changes)

    monkeypatch.setattr(AgentRun, "set_record", first_one_late)
    with trio.fail_after(10):
        ended = await runtime.executor.run(
            "cli-order", "write one.txt 1; write two.txt 2", owner="t", emit=Recorder()
        )
    assert ended.outcome is Outcome.FINISHED
    assert [e.request.prompt.rsplit("/", 1)[-1] for e in asked] == ["one.txt", "two.txt"]


def _answered_at(state: Path, session: str, question: str) -> str:
    """When the store says `question` of `session` was answered, as a refusal says it."""
    db = sqlite3.connect(state / "tasks.db")
    try:
        [(journal,)] = db.execute(
            "SELECT journal FROM tasks WHERE session_id = ?", (session,)
        ).fetchall()
    finally:
        db.close()
    [at] = [t["at"] for t in json.loads(journal)["questions"] if t["id"] == question]
    assert [t["state"] for t in json.loads(journal)["questions"] if t["id"] == question] == [
        "answered"
    ]
    return clock_time(at)


def test_pending_answer_names_its_question_and_a_late_or_wrong_one_is_refused(
    state: Path, tmp_path: Path
) -> None:
    hint = r"answer with: agentrt pending answer chat-q1 --question (q-[0-9a-f]{12}) 'TEXT'"
    parked = run(["run", "--session", "chat-q1", "ask Colour?; ask Size?"], state, tmp_path)
    assert parked.returncode == 3, parked.stderr
    found = re.search(hint, parked.stderr)
    assert found is not None, parked.stderr
    colour = found.group(1)
    first = run(["pending", "answer", "chat-q1", "--question", colour, "red"], state, tmp_path)
    assert first.returncode == 3, first.stderr  # parked again, on "Size?"
    found = re.search(hint, first.stderr)
    assert found is not None, first.stderr
    size = found.group(1)
    assert size != colour
    # A second answer for "Colour?" is refused saying why: never taken for "Size?".
    late = run(["pending", "answer", "chat-q1", "--question", colour, "blue"], state, tmp_path)
    assert late.returncode == 2
    when = _answered_at(state, "chat-q1", colour)
    assert late.stderr == f"agentrt: question {colour} was answered already at {when}\n"
    wrong = run(
        ["pending", "answer", "chat-q1", "--question", "q-000000000000", "L"], state, tmp_path
    )
    assert wrong.returncode == 2
    assert wrong.stderr == (
        "agentrt: question q-000000000000 is not the question this task waits for: it waits "
        f"for {size}\n"
    )
    done = run(["pending", "answer", "chat-q1", "--question", size, "L"], state, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "You answered: red\nYou answered: L" in done.stdout
    assert "blue" not in done.stdout

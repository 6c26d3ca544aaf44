"""Each long suite of ``python -m stress`` on a small fixed sample, so ``make test`` runs them.

The full runs (``make stress``) kill the daemon over a hundred times, drop a
thousand connections, fuzz a hundred thousand inputs and storm a thousand
sessions; these samples check the same properties on a seed fixed here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio
from stress._common import SuiteResult
from stress.canary import run_canary
from stress.concurrency import _judge
from stress.concurrency import _Outcomes
from stress.concurrency import run_concurrency
from stress.crash import _committed_markers
from stress.crash import _started_markers
from stress.crash import integrity_check
from stress.crash import per_kind_table
from stress.crash import run_crash
from stress.disconnect import run_disconnect
from stress.fleet import run_fleet
from stress.fuzz import run_fuzz
from stress.isolation import run_isolation
from stress.load import run_load

from agentrt import Message
from agentrt import ToolCall

#: Runs whole daemons and suites: slower than most, and slower still on a busy machine.
pytestmark = pytest.mark.deadline(120)

SEED = 20261130


def passed(result: SuiteResult) -> bool:
    print(result.notes)
    return result.ok and not result.failures


async def test_killing_the_daemon_loses_no_pending_task_and_redoes_no_committed_call() -> None:
    with trio.fail_after(90):
        result = await run_crash(6, SEED, max_open=2)
    assert passed(result), result.failures
    assert result.done == 6
    assert result.detail.startswith("calls re-run: 0 committed, ")
    assert "6 integrity checks" in result.notes[1]


def test_an_integrity_check_finds_a_damaged_store(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a TEXT)")
        conn.execute("CREATE INDEX t_a ON t (a)")
        conn.executemany("INSERT INTO t VALUES (?)", [(str(n) * 50,) for n in range(2000)])
    assert integrity_check(db) == "ok"
    data = bytearray(db.read_bytes())
    page = 4096
    data[5 * page + 100 : 5 * page + 600] = b"\xff" * 500  # scribble over a b-tree page
    db.write_bytes(bytes(data))
    assert integrity_check(db) != "ok"


def test_a_shell_call_counts_as_committed_only_once_its_result_is_in_the_transcript() -> None:
    call = ToolCall("c1", "shell", {"command": "echo m0x0 >> counter"})
    other = ToolCall("c2", "shell", {"command": "echo m0x1 >> counter"})
    planned = (Message.user("x"), Message.assistant("", (call, other)))
    assert _committed_markers(planned, ("m0x0", "m0x1")) == set()
    done = (*planned, Message.tool_result(call, "[exit status 0]"))
    assert _committed_markers(done, ("m0x0", "m0x1")) == {"m0x0"}


def test_a_subagents_calls_count_as_committed_in_its_journal_or_with_its_spawn() -> None:
    from agentrt import TaskRecord
    from agentrt.store.record import SubagentJournal

    markers = ("m0x0", "m0x1", "m0x2")
    spawn = ToolCall("c1", "spawn", {"task": "sh echo m0x0 >> counter; sh echo m0x1 >> counter"})
    top = ToolCall("c2", "shell", {"command": "echo m0x2 >> counter"})
    inner = ToolCall("c1", "shell", {"command": "echo m0x0 >> counter"})
    other = ToolCall("c2", "shell", {"command": "echo m0x1 >> counter"})
    journal = SubagentJournal(
        "sub1",
        (
            Message.user("..."),
            Message.assistant("", (inner, other)),
            Message.tool_result(inner, "[exit status 0]"),
        ),
        attempts={"c1": 1, "c2": 1},
    )
    planned = (Message.user("x"), Message.assistant("", (spawn, top)))
    record = TaskRecord("cli-x", "x", planned, attempts={"c2": 1}, subagents={"c1": journal})
    assert _committed_markers(planned, markers, [journal]) == {"m0x0"}
    # Started, not committed: the subagent's second call and the task's own shell.
    assert _started_markers(record, markers) == {"m0x1", "m0x2"}
    # Once the spawn's result is committed, every call inside it is.
    done = (*planned, Message.tool_result(spawn, "done"))
    assert _committed_markers(done, markers) == {"m0x0", "m0x1"}


def test_the_per_kind_counts_are_a_row_per_kind_of_kill() -> None:
    row = {
        "kills": 3,
        "committed re-run": 0,
        "begun again": 2,
        "shown as attempt>=2": 2,
        "half-written": 1,
    }
    lines = per_kind_table({"daemon": row, "all": {**row, "kills": 10}})
    assert lines[0].split() == [
        "kill", "kills", "committed", "re-run", "begun", "again", "shown", "as",
        "attempt>=2", "half-written",
    ]  # fmt: skip
    assert lines[1].split() == ["all", "10", "0", "2", "2", "1"]
    assert lines[2].split() == ["daemon", "3", "0", "2", "2", "1"]


def test_a_race_where_the_task_ran_twice_is_a_double_run_and_a_failure() -> None:
    result = SuiteResult("concurrency", "races run", "double runs")
    outcomes = _Outcomes()
    _judge("race 1", [True, False], ["ran (exit 0)", "refused: busy"], 1, result, outcomes, "")
    _judge("race 2", [True, True], ["ran (exit 0)", "ran (exit 0)"], 2, result, outcomes, "")
    _judge("race 3", [False, True], ["ran (finished)", "ran (finished)"], 2, result, outcomes, "")
    _judge(
        "race 4",
        [False, False],
        ["refused: a", "crashed (exit 1): Traceback"],
        0,
        result,
        outcomes,
        "",
    )
    _judge("race 5", [False, False], ["refused: a", "refused: b"], 0, result, outcomes, "")
    assert outcomes.counts == {"once": 1, "double run": 2, "unclear": 1, "neither ran": 1}
    assert result.bad == 3
    assert "race 2: the task ran 2 times" in result.failures[0]


async def test_two_runners_of_one_task_are_raced_and_each_race_is_judged() -> None:
    with trio.fail_after(120):
        result = await run_concurrency(2, SEED)
    assert result.done == 4
    doubles = int(result.detail.removeprefix("double runs: "))
    # Every failure is a double run (none unclear), and every double run is a failure.
    assert result.bad == doubles
    assert all("ran 2 times" in f for f in result.failures)


async def test_two_resumes_or_two_daemons_never_run_one_task_twice() -> None:
    with trio.fail_after(120):
        result = await run_concurrency(3, SEED + 1)
    assert passed(result), result.failures


async def test_vanishing_connections_leave_no_entry_no_task_and_keep_pending_tasks() -> None:
    with trio.fail_after(60):
        result = await run_disconnect(120, SEED)
    assert passed(result), result.failures
    assert result.done == 120


async def test_fuzzed_input_never_kills_the_daemon_and_always_gets_a_clear_error() -> None:
    with trio.fail_after(120):
        result = await run_fuzz(120, SEED)
    assert passed(result), result.failures
    assert result.done >= 120


async def test_no_window_user_or_tokenless_request_reaches_another_window() -> None:
    with trio.fail_after(60):
        result = await run_isolation(SEED)
    assert passed(result), result.failures
    assert result.done > 150


async def test_canary_secret_and_password_appear_nowhere_after_runs_pauses_and_crashes() -> None:
    with trio.fail_after(90):
        result = await run_canary(SEED)
    assert passed(result), result.failures
    assert result.done > 10


@pytest.mark.parametrize(("sessions", "seconds"), [(60, 2.0)])
async def test_a_session_storm_leaks_nothing_and_accounts_for_every_run(
    sessions: int, seconds: float
) -> None:
    with trio.fail_after(90):
        result = await run_load(sessions, seconds, SEED)
    assert passed(result), result.failures
    assert result.done == sessions


async def test_a_fleet_under_kills_races_and_misrouted_answers_runs_each_task_once(
    postgres_base: str,
) -> None:
    with trio.fail_after(100):
        result = await run_fleet(4, 2, 1, SEED, stalls=1)
    assert passed(result), result.failures
    assert result.done == 8
    assert result.detail == (
        "double runs: 0; committed calls re-run after a kill: 0; after a stall: 0; "
        "stalled tools not fenced: 0"
    )
    assert "1 daemons killed (SIGKILL) mid-run" in result.notes[2]
    assert "1 daemons stopped (SIGSTOP) past their lease" in result.notes[3]

"""Questions are addressable: one id live and saved, answers that name it, late answers refused.

Over HTTP (a real server on loopback), over the daemon's socket, and in the
task store of each backend: an answer naming a question the task no longer
waits for is refused saying why, and is never taken as the answer to the
question that waits now.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from agentrt import Cause
from agentrt import LateAnswerError
from agentrt import Outcome
from agentrt import QuestionState
from agentrt import Request
from agentrt import RequestContext
from agentrt import Runtime
from agentrt import TaskStatus
from agentrt import bind_context
from agentrt.daemon import Daemon
from agentrt.protocol.client import Client
from agentrt.protocol.frames import Ack
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import AskWithdrawn
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import Scope
from agentrt.protocol.frames import TaskFrame
from agentrt.store import Store
from agentrt.store.record import SavedQuestion
from agentrt.store.record import TaskRecord
from agentrt.store.record import TaskSummary
from agentrt.vocab.questions import RECENT_QUESTIONS
from agentrt.vocab.questions import QuestionTrace
from agentrt.vocab.questions import clock_time
from agentrt.vocab.questions import legacy_question_id
from agentrt.vocab.questions import trace_of

from .conftest import Recorder
from .conftest import raw_sql
from .test_http import Events
from .test_http import Server
from .test_http import assert_error
from .test_http import serving_http
from .test_http import start

LIMIT = 10


@pytest.fixture
async def server(runtime: Runtime) -> AsyncIterator[Server]:
    async with serving_http(runtime) as served:
        yield served


@pytest.fixture
async def events(server: Server) -> AsyncIterator[Events]:
    async with server.client.stream("GET", "/v1/events") as response:
        reader = Events(response.aiter_lines())
        await reader.expect("ready")
        yield reader


async def answered_at(runtime: Runtime, session: str, question_id: str) -> str:
    """When the task of `session` says `question_id` was answered, as a refusal says it."""
    record = await runtime.store.load(session)
    assert record is not None
    trace = trace_of(record.questions, question_id)
    assert trace is not None and trace.state is QuestionState.ANSWERED, record.questions
    return clock_time(trace.at)


# -- over HTTP --------------------------------------------------------------------


async def test_a_second_answer_for_an_answered_question_is_refused_and_the_next_still_waits(
    server: Server, events: Events
) -> None:
    """The bug this ends: "Colour?" answered, "Size?" saved, a second answer for "Colour?"
    was accepted (202) and taken as the answer to "Size?"."""
    resume = "/v1/session/shop/task/resume"
    started = await start(server, "shop", "ask Colour?; ask Size?")
    parked = await events.expect("run_ended", task_hash=started["task_hash"])
    assert parked["outcome"] == "awaiting_answer"
    task = (await server.client.get("/v1/session/shop/task")).json()["task"]
    colour = task["question"]
    assert (colour["prompt"], colour["state"]) == ("Colour?", "waiting")
    assert parked["question_id"] == colour["id"]

    first = await server.client.post(resume, json={"answer": "red", "question_id": colour["id"]})
    assert first.status_code == 202, first.text
    parked = await events.expect("run_ended", task_hash=first.json()["task_hash"])
    assert (parked["outcome"], parked["question"]) == ("awaiting_answer", "Size?")
    size = parked["question_id"]
    assert size != colour["id"]

    second = await server.client.post(resume, json={"answer": "blue", "question_id": colour["id"]})
    message = assert_error(second, 409, "late_answer")
    when = await answered_at(server.runtime, "chat-shop", colour["id"])
    assert message == f"question {colour['id']} was answered already at {when}"

    # "Size?" still waits, under its own id, and takes its answer by that id.
    task = (await server.client.get("/v1/session/shop/task")).json()["task"]
    assert task["status"] == "awaiting_answer"
    assert task["question"]["id"] == size
    assert (task["question"]["prompt"], task["question"]["state"]) == ("Size?", "waiting")
    third = await server.client.post(resume, json={"answer": "L", "question_id": size})
    assert third.status_code == 202, third.text
    done = await events.expect("run_ended", task_hash=third.json()["task_hash"])
    assert done["outcome"] == "finished"
    answers = [
        m.content
        for m in await server.runtime.store.load_history("chat-shop")
        if m.role.value == "tool"
    ]
    assert answers == ["red", "L"]


async def test_an_answer_naming_no_question_goes_to_the_one_the_task_waits_for(
    server: Server, events: Events
) -> None:
    started = await start(server, "script", "ask Name?")
    await events.expect("run_ended", task_hash=started["task_hash"], outcome="awaiting_answer")
    resumed = await server.client.post("/v1/session/script/task/resume", json={"answer": "Ada"})
    assert resumed.status_code == 202, resumed.text
    done = await events.expect("run_ended", task_hash=resumed.json()["task_hash"])
    assert done["outcome"] == "finished"
    assert "You answered: Ada" in done["text"]


async def test_an_answer_naming_an_unknown_question_is_told_which_one_waits(
    server: Server, events: Events
) -> None:
    started = await start(server, "other", "ask Name?")
    parked = await events.expect("run_ended", task_hash=started["task_hash"])
    refused = await server.client.post(
        "/v1/session/other/task/resume", json={"answer": "Ada", "question_id": "q-000000000000"}
    )
    assert assert_error(refused, 409, "late_answer") == (
        "question q-000000000000 is not the question this task waits for: it waits for "
        f"{parked['question_id']}"
    )
    record = await server.runtime.store.load("chat-other")
    assert record is not None and record.question is not None
    assert record.question.id == parked["question_id"]  # nothing changed
    assert record.status is TaskStatus.AWAITING_ANSWER


async def test_a_late_answer_to_a_question_withdrawn_by_a_pause_is_refused_and_its_task_asks_it_again(
    server: Server, events: Events
) -> None:
    started = await start(server, "held", "sh true")
    question = await events.expect("question", kind="confirm")
    await server.client.post(f"/v1/task/{started['task_hash']}/cancel", json={"cause": "pause"})
    await events.expect("run_ended", task_hash=started["task_hash"], cause="pause")
    closed = [e for e in events.seen if e["type"] == "question_closed"] or [
        await events.expect("question_closed", id=question["id"])
    ]
    assert [(e["id"], e["state"]) for e in closed] == [(question["id"], "withdrawn")]
    late = await server.client.post(
        f"/v1/questions/{question['id']}/answer", json={"value": "allow"}
    )
    assert assert_error(late, 409, "late_answer") == (
        f"question {question['id']} was withdrawn: its run was paused"
    )
    # The kept task waits for the same question, by the same id; resumed, it asks it again.
    task = (await server.client.get("/v1/session/held/task")).json()["task"]
    assert (task["question"]["id"], task["question"]["state"]) == (question["id"], "withdrawn")
    resumed = await server.client.post("/v1/session/held/task/resume")
    assert resumed.status_code == 202
    again = await events.expect("question", kind="confirm")
    assert again["id"] == question["id"]
    answered = await server.client.post(
        f"/v1/questions/{question['id']}/answer", json={"value": "allow"}
    )
    assert answered.status_code == 200, answered.text
    done = await events.expect("run_ended", task_hash=resumed.json()["task_hash"])
    assert done["outcome"] == "finished"
    twice = await server.client.post(
        f"/v1/questions/{question['id']}/answer", json={"value": "deny"}
    )
    settled = server.runtime.registry.settled(question["id"])
    assert settled is not None
    assert assert_error(twice, 409, "late_answer") == (
        f"question {question['id']} was answered already at {clock_time(settled.trace.at)}"
    )


async def test_a_question_of_a_session_http_may_not_see_is_unknown_to_it(
    server: Server, runtime: Runtime
) -> None:
    # A Telegram chat's question, answered there: over HTTP it is unknown, as any id is.
    async with trio.open_nursery() as nursery:

        async def answer(task_status: trio.TaskStatus[None]) -> None:
            with runtime.registry.listen("tg-") as listener:
                task_status.started()
                (await listener.claim()).answer("blue")

        await nursery.start(answer)
        with bind_context(RequestContext("tg-77", None, "0123456789ab")):
            await runtime.registry.ask(Request.question("Colour?"), entry_id="q-0123456789ab")
    assert runtime.registry.settled("q-0123456789ab") is not None
    hidden = await server.client.post("/v1/questions/q-0123456789ab/answer", json={"value": "x"})
    unknown = await server.client.post("/v1/questions/q-ffffffffffff/answer", json={"value": "x"})
    assert assert_error(hidden, 404, "unknown_question").replace(
        "q-0123456789ab", "X"
    ) == assert_error(unknown, 404, "unknown_question").replace("q-ffffffffffff", "X")


# -- over the daemon's socket --------------------------------------------------------


async def test_a_frame_answer_for_a_stale_question_gets_an_error_frame_and_the_connection_goes_on(
    daemon: Daemon,
) -> None:
    with trio.fail_after(LIMIT):
        async with await Client.connect(daemon.socket_path) as client:
            await client.send(Run("ask Colour?"))
            ask = await client.wait_for(AskFrame)
            await client.send(AnswerFrame(ask.id, "blue"))
            await client.wait_for(EndedFrame)
            await client.send(AnswerFrame(ask.id, "green"))
            refused = await client.receive()
            settled = daemon.runtime.registry.settled(ask.id)
            assert settled is not None
            assert refused == ErrorFrame(
                ErrorCode.INVALID,
                f"question {ask.id} was answered already at {clock_time(settled.trace.at)}",
                "answer",
            )
            # The connection goes on: the next request is served.
            await client.send(PendingRequest(PendingAction.LIST))
            assert await client.receive() == PendingList(())


async def test_a_frame_answer_to_a_question_whose_run_was_paused_is_refused_saying_so(
    daemon: Daemon,
) -> None:
    with trio.fail_after(LIMIT):
        async with await Client.connect(daemon.socket_path) as client:
            await client.send(Run("ask Colour?"))
            task = await client.wait_for(TaskFrame)
            ask = await client.wait_for(AskFrame)
            await client.send(Cancel(task.task_hash, Cause.PAUSE))
            withdrawn = await client.wait_for(AskWithdrawn)
            reason = f"question {ask.id} was withdrawn: its run was paused"
            assert withdrawn == AskWithdrawn(ask.id, reason)
            ended = await client.wait_for(EndedFrame)
            assert (ended.cause, ended.pending_kept) == (Cause.PAUSE, True)
            await client.send(AnswerFrame(ask.id, "green"))
            assert await client.receive() == ErrorFrame(ErrorCode.INVALID, reason, "answer")
            # The kept task lists its question's id; a resume asks it again under that id.
            await client.send(PendingRequest(PendingAction.LIST))
            listed = await client.receive()
            assert isinstance(listed, PendingList)
            assert [t.question_id for t in listed.tasks] == [ask.id]
            await client.send(PendingRequest(PendingAction.RESUME, session=task.session_id))
            again = await client.wait_for(AskFrame)
            assert (again.id, again.prompt) == (ask.id, "Colour?")
            await client.send(AnswerFrame(ask.id, "green"))
            assert await client.wait_for(Ack) == Ack(
                "answer", "answered; the run goes on", task=again.task
            )
            done = await client.wait_for(EndedFrame)
            assert done.outcome is Outcome.FINISHED


async def test_a_resume_frame_naming_an_answered_question_is_refused_and_changes_nothing(
    daemon: Daemon, runtime: Runtime
) -> None:
    with trio.fail_after(LIMIT):
        ended = await runtime.executor.run(
            "chat-sizes", "ask Colour?; ask Size?", owner=object(), emit=Recorder()
        )
        colour = ended.question_id
        assert colour is not None
        # As the `agentrt` command connects: it may resume a chat session's task.
        async with await Client.connect(daemon.socket_path, scope=Scope.ALL) as client:
            await client.send(
                PendingRequest(
                    PendingAction.RESUME, session="chat-sizes", answer="red", question_id=colour
                )
            )
            # A chat session's question is saved, not asked: the run parks on "Size?".
            parked = await client.wait_for(EndedFrame)
            assert (parked.outcome, parked.question) == (Outcome.AWAITING_ANSWER, "Size?")
            await client.send(
                PendingRequest(
                    PendingAction.RESUME, session="chat-sizes", answer="blue", question_id=colour
                )
            )
            refused = await client.receive()
            when = await answered_at(runtime, "chat-sizes", colour)
            assert refused == ErrorFrame(
                ErrorCode.INVALID, f"question {colour} was answered already at {when}", "pending"
            )
    record = await runtime.store.load("chat-sizes")
    assert record is not None and record.question is not None
    assert (record.question.id, record.question.prompt) == (parked.question_id, "Size?")


# -- the task store of each backend ------------------------------------------------


async def test_the_recent_questions_and_their_states_are_kept_with_the_task(store: Store) -> None:
    saved = SavedQuestion("call_0", "Size?", task="0123456789ab", origin="chat-")
    traces = tuple(
        QuestionTrace(f"q-{n:012x}", QuestionState.ANSWERED, 1_700_000_000.0 + n)
        for n in range(RECENT_QUESTIONS + 5)
    )
    record = TaskRecord("chat-kept", "go", (), question=saved)
    for trace in traces:
        record = record.noting(trace)
    expired = QuestionTrace(saved.id, QuestionState.EXPIRED, 1_800_000_000.0, waited=1800.0)
    record = record.noting(expired)
    await store.save(record)
    loaded = await store.load("chat-kept")
    assert loaded is not None
    # Bounded: the last RECENT_QUESTIONS of them, oldest first, the saved one's state with it.
    assert loaded.questions == (*traces[-(RECENT_QUESTIONS - 1) :], expired)
    assert loaded.question == SavedQuestion(
        "call_0",
        "Size?",
        id=saved.id,
        task="0123456789ab",
        origin="chat-",
        state=QuestionState.EXPIRED,
    )
    [listed] = (await store.list_page("chat-")).items
    assert isinstance(listed, TaskSummary)
    assert listed.question == loaded.question
    assert expired.refusal() == f"question {saved.id} expired after 30m"


async def test_a_question_saved_before_questions_had_ids_reads_with_one_that_stays(
    any_runtime: Runtime,
) -> None:
    runtime = any_runtime
    await runtime.executor.run("chat-old", "ask Name?", owner=object(), emit=Recorder())
    store = runtime.store
    saved = await store.load("chat-old")
    assert saved is not None and saved.question is not None
    call = saved.question.call_id
    # The column as an older agentrt wrote it: no id, no state.
    raw_sql(
        store,
        "UPDATE tasks SET question = ? WHERE session_id = 'chat-old'",
        (json.dumps({"call_id": call, "prompt": "Name?", "kind": "question"}),),
    )
    first, second = await store.load("chat-old"), await store.load("chat-old")
    assert first is not None and second is not None and first.question is not None
    assert second.question is not None
    assert first.question.id == second.question.id == legacy_question_id(call, "Name?")
    assert first.question.id != saved.question.id
    ended = await runtime.executor.resume(
        "chat-old", owner=object(), emit=Recorder(), answer="Ada", question_id=first.question.id
    )
    assert ended.outcome is Outcome.FINISHED


async def test_resuming_with_an_answer_for_an_answered_question_is_refused_on_each_store(
    any_runtime: Runtime,
) -> None:
    runtime = any_runtime
    ended = await runtime.executor.run(
        "chat-two", "ask Colour?; ask Size?", owner=object(), emit=Recorder()
    )
    colour = ended.question_id
    assert colour is not None
    again = await runtime.executor.resume(
        "chat-two", owner=object(), emit=Recorder(), answer="red", question_id=colour
    )
    assert (again.outcome, again.question) == (Outcome.AWAITING_ANSWER, "Size?")
    when = await answered_at(runtime, "chat-two", colour)
    with pytest.raises(LateAnswerError) as refused:
        await runtime.executor.resume(
            "chat-two", owner=object(), emit=Recorder(), answer="blue", question_id=colour
        )
    assert str(refused.value) == f"question {colour} was answered already at {when}"
    record = await runtime.store.load("chat-two")
    assert record is not None and record.question is not None
    assert (record.question.id, record.question.prompt) == (again.question_id, "Size?")
    assert record.runs == 2  # the refused resume did not touch the task


def test_an_sqlite_row_keeps_the_questions_in_its_journal_column(tmp_path: Path) -> None:
    async def main() -> None:
        from agentrt import TaskStore

        store = await TaskStore.open(tmp_path / "tasks.db")
        trace = QuestionTrace("q-0123456789ab", QuestionState.WITHDRAWN, 5.0, reason="r")
        await store.save(TaskRecord("chat-j", "go", (), questions=(trace,)))
        await store.aclose()

    trio.run(main)
    db = sqlite3.connect(tmp_path / "tasks.db")
    [(journal,)] = db.execute("SELECT journal FROM tasks").fetchall()
    db.close()
    assert json.loads(journal) == {
        "questions": [
            {"id": "q-0123456789ab", "state": "withdrawn", "at": 5.0, "reason": "r", "waited": None}
        ]
    }

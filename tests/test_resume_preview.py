"""The preview of a resume: its lines (`preview_lines`) and its JSON (`preview_json`), from records.

Each record is built as a stop leaves one; the preview is worked out as every
front-end works it out (`resume_preview`, which asks the tools whether they
record their start), and the words and the JSON are pinned exactly: they are
what a person reads before resuming.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from agentrt.agent.preview import resume_preview
from agentrt.agent.tools import TOOLS
from agentrt.agent.tools import records_start
from agentrt.http import openapi_document
from agentrt.models.messages import Message
from agentrt.models.messages import ToolCall
from agentrt.present.preview import preview_lines
from agentrt.present.shapes import preview_json
from agentrt.store.ledger import preview_of
from agentrt.store.ledger import resume_counts
from agentrt.store.record import SavedQuestion
from agentrt.store.record import SubagentJournal
from agentrt.store.record import TaskRecord
from agentrt.vocab.clamp import ARGUMENT_LIMIT
from agentrt.vocab.clamp import clamp
from agentrt.vocab.stops import CallState
from agentrt.vocab.stops import Interruption
from agentrt.vocab.stops import LedgerCall
from agentrt.vocab.stops import StopKind
from agentrt.vocab.terms import Cause
from agentrt.vocab.terms import RequestKind
from agentrt.vocab.terms import TaskStatus

READ = ToolCall("call_0_0", "read_file", {"path": "a.txt"})
SHELL = ToolCall("call_1_0", "shell", {"command": "make"})
READ_AGAIN = ToolCall("call_1_1", "read_file", {"path": "b.txt"})
#: An argument shortened when the snapshot was saved, its full value not kept.
WRITE_CUT = ToolCall(
    "call_1_2", "write_file", {"path": "c.txt", "content": clamp("x" * 9000, ARGUMENT_LIMIT)}
)


def paused(*messages: Message, **changes: Any) -> TaskRecord:
    """A task a pause left, its transcript `messages`."""
    fields: dict[str, Any] = {"status": TaskStatus.INTERRUPTED, "cause": Cause.PAUSE}
    return TaskRecord("cli-p", "do it", (Message.user("do it"), *messages), **(fields | changes))


def lines_of(record: TaskRecord) -> list[str]:
    return preview_lines(resume_preview(record))


def call_json(
    call_id: str, name: str, state: str = "done", *, may_have_run: bool = False
) -> dict[str, Any]:
    """One call of a preview's JSON, in its first attempt, of the top agent."""
    return {
        "call_id": call_id,
        "name": name,
        "agent": "",
        "state": state,
        "attempt": 1,
        "may_have_run": may_have_run,
    }


def validate(preview: dict[str, Any]) -> None:
    """`preview` fits the HTTP API's documented ``ResumePreview`` schema."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": "#/components/schemas/ResumePreview",
        "components": openapi_document()["components"],
    }
    jsonschema.Draft202012Validator(schema).validate(preview)


def test_a_task_with_nothing_to_redo_says_so() -> None:
    record = paused(Message.assistant("", [READ]), Message.tool_result(READ, "text"))
    assert lines_of(record) == [
        "resume will keep 1 call (its result is saved, it does not run again)",
        "nothing is redone: the model goes on from what was saved",
    ]
    shown = preview_json(resume_preview(record))
    assert shown == {
        "stop": "pause",
        "kept": [call_json("call_0_0", "read_file")],
        "to_run": [],
        "reissue": [],
        "questions": [],
        "regenerated_words": 0,
        "lines": lines_of(record),
    }
    validate(shown)


def test_a_call_stopped_while_running_at_the_pause() -> None:
    sleep = ToolCall("call_0_0", "sleep", {"seconds": 30})
    stopped = Interruption(
        StopKind.PAUSE, 5.0, (LedgerCall("call_0_0", "sleep", CallState.STOPPED),)
    )
    record = paused(Message.assistant("", [sleep]), interruptions=(stopped,))
    assert lines_of(record) == [
        "resume will run 1 call:",
        "  sleep call_0_0 (stopped while running at the pause)",
    ]
    shown = preview_json(resume_preview(record))
    assert shown["to_run"] == [call_json("call_0_0", "sleep", "stopped", may_have_run=True)]
    validate(shown)


def test_a_call_that_may_have_run_is_its_second_attempt() -> None:
    # The shell recorded its start, and the run stopped before its result was saved.
    record = paused(Message.assistant("", [SHELL]), cause=Cause.DISCONNECT, attempts={SHELL.id: 1})
    assert lines_of(record) == [
        "resume will run 1 call:",
        "  shell call_1_0 (attempt 2: may already have run; its result was never saved)",
    ]
    shown = preview_json(resume_preview(record))
    assert (shown["stop"], shown["to_run"][0]["attempt"], shown["to_run"][0]["state"]) == (
        "disconnect",
        2,
        "may_have_run",
    )
    assert shown["to_run"][0]["may_have_run"] is True
    validate(shown)


def test_after_a_crash_only_a_tool_that_records_its_start_is_known_not_to_have_begun() -> None:
    write = ToolCall("call_0_1", "write_file", {"path": "a.txt", "content": "hi"})
    # Left running by a process that is gone (no runner): a crash.
    record = paused(
        Message.assistant("", [READ, write]), status=TaskStatus.RUNNING, cause=None, runner=None
    )
    assert lines_of(record) == [
        "resume will run 2 calls:",
        "  read_file call_0_0 (may already have run; its result was never saved)",
        "  write_file call_0_1 (not started)",
    ]
    assert preview_json(resume_preview(record))["stop"] == "crash"


def test_the_tools_that_call_begin_effect_say_they_record_their_start() -> None:
    recording = {name for name, tool in TOOLS.items() if tool.RECORDS_START}
    assert recording == {"write_file", "edit_file", "shell", "store_secret"}
    assert [records_start(n) for n in ("write_file", "read_file", "spawn", "no_such_tool")] == [
        True,
        False,
        False,
        False,
    ]


def test_a_call_whose_arguments_were_shortened_is_issued_again() -> None:
    record = paused(Message.assistant("", [WRITE_CUT]))
    assert lines_of(record) == [
        "the model will have to issue again: write_file call_1_2 (an argument was shortened)"
    ]
    shown = preview_json(resume_preview(record))
    assert [c["call_id"] for c in shown["reissue"]] == ["call_1_2"]
    assert shown["to_run"] == []
    validate(shown)


def test_a_saved_question_is_asked_again() -> None:
    ask = ToolCall("call_0_0", "ask_user", {"question": "Colour?"})
    record = paused(
        Message.assistant("", [ask]),
        status=TaskStatus.AWAITING_ANSWER,
        cause=None,
        question=SavedQuestion("call_0_0", "Colour?", RequestKind.QUESTION),
    )
    # The question is all its call does: it is listed once, as asked again.
    assert lines_of(record) == ['asked again: "Colour?"']
    shown = preview_json(resume_preview(record))
    assert (shown["questions"], shown["stop"]) == (["Colour?"], None)
    validate(shown)


def test_the_words_of_an_unsaved_reply_are_regenerated() -> None:
    record = paused(Message.assistant("", [READ]), Message.tool_result(READ, "t"), lost_words=40)
    assert lines_of(record)[1:] == ["about 40 words of the reply will be regenerated"]
    one = paused(lost_words=1)
    assert lines_of(one) == ["about 1 word of the reply will be regenerated"]
    shown = preview_json(resume_preview(record))
    assert shown["regenerated_words"] == 40
    validate(shown)


def test_a_subagents_call_is_named_with_its_agent_path() -> None:
    spawn = ToolCall("call_0_0", "spawn", {"task": "sh make"})
    inner = ToolCall("call_0_0", "shell", {"command": "make"})
    journal = SubagentJournal(
        "sub1",
        (Message.user("sh make"), Message.assistant("", [inner])),
        attempts={inner.id: 1},
        interruptions=(
            Interruption(
                StopKind.PAUSE, 5.0, (LedgerCall(inner.id, "shell", CallState.STOPPED, "sub1", 1),)
            ),
        ),
    )
    # The pause saw the spawn running, and its subagent's shell call in its effect.
    record = paused(
        Message.assistant("", [spawn]),
        subagents={spawn.id: journal},
        interruptions=(
            Interruption(StopKind.PAUSE, 5.0, (LedgerCall(spawn.id, "spawn", CallState.STOPPED),)),
        ),
    )
    assert lines_of(record) == [
        "resume will run 2 calls:",
        "  spawn call_0_0 (stopped while running at the pause)",
        "  [sub1] shell call_0_0 (attempt 2: may already have run; stopped while running at the "
        "pause)",
    ]
    shown = preview_json(resume_preview(record))
    assert [(c["agent"], c["name"]) for c in shown["to_run"]] == [("", "spawn"), ("sub1", "shell")]
    validate(shown)


def test_everything_at_once_reads_as_every_front_end_shows_it() -> None:
    kept = [ToolCall(f"call_0_{i}", "read_file", {"path": f"{i}.txt"}) for i in range(3)]
    stopped = Interruption(
        StopKind.PAUSE,
        5.0,
        (
            LedgerCall(SHELL.id, "shell", CallState.STOPPED, attempts=1),
            LedgerCall(READ_AGAIN.id, "read_file", CallState.NOT_STARTED),
        ),
    )
    ask = ToolCall("call_1_3", "ask_user", {"question": "Colour?"})
    record = paused(
        Message.assistant("", kept),
        *(Message.tool_result(call, "t") for call in kept),
        Message.assistant("", [SHELL, READ_AGAIN, WRITE_CUT]),
        attempts={SHELL.id: 1},
        interruptions=(stopped,),
        question=SavedQuestion(ask.id, "Colour?"),
        lost_words=40,
    )
    assert lines_of(record) == [
        "resume will keep 3 calls (their results are saved, they do not run again)",
        "resume will run 2 calls:",
        "  shell call_1_0 (attempt 2: may already have run; stopped while running at the pause)",
        "  read_file call_1_1 (not started)",
        "the model will have to issue again: write_file call_1_2 (an argument was shortened)",
        'asked again: "Colour?"',
        "about 40 words of the reply will be regenerated",
    ]
    validate(preview_json(resume_preview(record)))


def test_a_long_or_many_lined_question_is_one_short_line() -> None:
    record = paused(question=SavedQuestion("c", "Which\nof  these?" + " x" * 200))
    [line] = [line for line in lines_of(record) if line.startswith("asked again")]
    assert line.startswith('asked again: "Which of these? x x')
    assert line.endswith('..."')
    assert len(line) == len('asked again: ""') + 200


def test_a_resumes_first_event_counts_what_its_preview_lists() -> None:
    kept = [ToolCall(f"call_0_{i}", "read_file", {"path": f"{i}.txt"}) for i in range(3)]
    inner = ToolCall("call_0_0", "shell", {"command": "make"})
    begun = LedgerCall(SHELL.id, "shell", CallState.STOPPED, attempts=1)
    journal = SubagentJournal(
        "sub1",
        (
            Message.user("sh make"),
            Message.assistant("", [READ]),
            Message.tool_result(READ, "t"),
            Message.assistant("", [inner]),
        ),
        attempts={inner.id: 1},
    )
    records = [
        paused(),
        paused(Message.assistant("", [READ]), Message.tool_result(READ, "text")),
        paused(Message.assistant("", [SHELL]), cause=Cause.DISCONNECT, attempts={SHELL.id: 1}),
        paused(Message.assistant("", [READ, SHELL]), status=TaskStatus.RUNNING, runner=None),
        paused(Message.assistant("", [WRITE_CUT, READ_AGAIN])),
        paused(
            Message.assistant("", kept),
            *(Message.tool_result(call, "t") for call in kept),
            Message.assistant("", [SHELL, READ_AGAIN, WRITE_CUT]),
            attempts={SHELL.id: 1},
            interruptions=(Interruption(StopKind.PAUSE, 5.0, (begun,)),),
            question=SavedQuestion("call_1_3", "Colour?"),
        ),
        paused(Message.assistant("", [READ]), subagents={"call_0_0": journal}),
    ]
    counted = [resume_counts(record, records_start) for record in records]
    previews = [preview_of(record, records_start, resuming=True) for record in records]
    assert counted == [(len(p.kept), len(p.rerun)) for p in previews]
    # The cases keep calls, run calls begun before, both, and neither.
    assert counted == [(0, 0), (1, 0), (0, 1), (0, 0), (0, 0), (3, 1), (1, 1)]

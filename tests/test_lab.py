"""`agentrt lab`: every boundary with every cause, the invariants, and planted bugs it must find."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentrt import Cause
from agentrt import Message
from agentrt import Outcome
from agentrt import ToolResultEvent
from agentrt.agent.checkpoint import Checkpoints
from agentrt.agent.checkpoint import UndoResult
from agentrt.agent.loop import AgentRun
from agentrt.apps import lab
from agentrt.apps.lab import CAUSES
from agentrt.apps.lab import Conversation
from agentrt.apps.lab import Lab
from agentrt.apps.lab import LabReport
from agentrt.apps.lab import _changed
from agentrt.apps.lab import format_table
from agentrt.apps.lab import real_kills
from agentrt.apps.lab import replay_answers
from agentrt.models.messages import Role
from agentrt.store.record import SavedQuestion
from agentrt.store.record import TaskRecord
from agentrt.vocab.questions import QuestionState
from agentrt.vocab.questions import QuestionTrace
from agentrt.vocab.terms import SETTLE
from agentrt.vocab.terms import Settle

#: Runs whole daemons and suites: slower than most, and two or three times slower on a busy
#: machine (the tour of 205 points takes 60 s on a quiet one, up to 160 s on a loaded one).
pytestmark = [
    pytest.mark.deadline(300),
    # The tour's report is made once for the module: its tests run in one test process.
    pytest.mark.xdist_group("lab-tour"),
]

TOUR = "write a.txt hi; ask Name?; sh echo x >> log; stream 5"


@pytest.fixture(scope="module")
def tour_report() -> LabReport:
    return Lab(Conversation(TOUR, answers={"Name?": "Ada"})).run()


def test_every_boundary_with_every_cause_keeps_every_invariant(tour_report: LabReport) -> None:
    report = tour_report
    assert report.violations == []
    assert len(report.points) == len(report.boundaries) * len(CAUSES)
    names = [b.name for b in report.boundaries]
    assert names[0] == "store.create"
    assert names[1] == "TaskStarted"
    assert names[-1] == "RunEnded finished"
    assert "ToolCallEvent shell" in names
    # A user-cancel never leaves a task; a pause before the end always keeps one.
    finish = names.index("store.finish")
    for b in report.boundaries:
        cancel = report.point(b.index, "user_cancel")
        pause = report.point(b.index, "pause")
        assert cancel is not None
        assert pause is not None
        assert not cancel.kept
        if b.index < finish - 1:  # before the final answer is saved
            assert pause.kept, b


def test_costs_are_measured_against_the_baseline(tour_report: LabReport) -> None:
    names = [b.name for b in tour_report.boundaries]
    # Pausing while the model streams its first reply makes it say that again.
    streaming = names.index("TextEvent") + 2
    point = tour_report.point(streaming, "pause")
    assert point is not None
    assert point.cost is not None
    assert point.cost.chars_regenerated > 0
    assert point.cost.calls_rerun == 0
    # Pausing right after a call began its effect makes that call run again.
    began = next(b.index for b in tour_report.boundaries if b.label[2].startswith("attempts"))
    later = tour_report.point(began, "pause")
    assert later is not None
    assert later.cost is not None
    assert later.cost.calls_rerun >= 1
    table = format_table(tour_report)
    assert "0 invariant violations" in table
    assert f"{len(tour_report.points)} points checked" in table


def test_a_planted_bug_pause_deletes_the_task_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SETTLE, (Outcome.CANCELLED, Cause.PAUSE), Settle.DELETE)
    report = Lab(Conversation("sleep 5; stream 3"), causes=("pause", "shutdown")).run()
    found = {(v.cause, v.rule) for v in report.violations}
    assert ("pause", "kept") in found
    assert all(v.cause == "pause" for v in report.violations)
    first = min(v.boundary for v in report.violations)
    assert first == 0  # from the very first write on
    assert "--at 0 --cause pause" in report.violations[0].replay


def test_a_planted_bug_a_skipped_commit_is_found_at_the_boundary_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commit = AgentRun.commit

    async def skip_write_results(
        self: AgentRun, message: Message, *, told: bool = False, **changes: object
    ) -> None:
        if message.role is Role.TOOL and message.name == "write_file":
            self.live.append(message)  # reported to the user, never saved
            return
        await commit(self, message, told=told, **changes)

    monkeypatch.setattr(AgentRun, "commit", skip_write_results)
    report = Lab(Conversation("write a.txt hi; stream 2"), causes=("pause",)).run()
    assert report.violations
    names = {b.index: b.name for b in report.boundaries}
    first = min(v.boundary for v in report.violations)
    assert names[first] == "ToolResultEvent write_file"
    # The call ran again; and the model was told it had not finished when it had.
    assert {v.rule for v in report.violations} == {"committed-rerun", "ledger"}


def test_a_planted_bug_a_resume_that_tells_the_model_nothing_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def tell_nothing(self: AgentRun) -> None:
        return None

    monkeypatch.setattr(AgentRun, "_tell_stops", tell_nothing)
    report = Lab(Conversation("sleep 5; stream 2"), causes=("pause",)).run()
    found = {(v.rule, v.detail) for v in report.violations}
    assert ("ledger", "the task's first prompt after the resume has no note of the stop") in found
    assert {v.rule for v in report.violations} == {"ledger"}


def test_a_planted_bug_a_running_call_told_as_not_started_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentrt.store.ledger import note_text

    def misstated(*args: Any, **kwargs: Any) -> str:
        return note_text(*args, **kwargs).replace("stopped while running (", "not started (")

    monkeypatch.setattr("agentrt.agent.loop.note_text", misstated)
    report = Lab(Conversation("sh echo x >> log; stream 2"), causes=("pause",)).run()
    details = {v.detail for v in report.violations}
    assert "call_1_0 is told not started, and its effect had begun" in details
    assert {v.rule for v in report.violations} == {"ledger"}


def test_a_real_sigkill_of_a_daemon_keeps_and_resumes_the_task() -> None:
    kills = real_kills(Conversation("write a.txt hi; sleep 1; stream 3"), 1, seed=3)
    assert len(kills) == 1
    assert kills[0].violations == ()


def test_the_command_prints_json_and_a_heatmap(tmp_path: Path) -> None:
    png = tmp_path / "cost.png"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "agentrt", "lab", "write a.txt hi; stream 2", "--json"),
            *("--heatmap", str(png), "--cause", "pause", "--cause", "crash"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["causes"] == ["pause", "crash"]
    assert data["points_checked"] == len(data["boundaries"]) * 2
    assert data["violations"] == []
    assert png.read_bytes().startswith(b"\x89PNG")


def test_the_command_says_what_is_wrong_with_its_input() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentrt", "lab", "ask Name?", "--answer", "no-equals-sign"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "PROMPT=ANSWER" in result.stderr


def test_a_replay_file_carries_its_answers_and_a_denied_confirmation_is_kept_denied(
    tmp_path: Path,
) -> None:
    replay = tmp_path / "talk.json"
    replay.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "tool_calls": [
                            {"name": "ask_user", "arguments": {"question": "Colour?"}},
                            {"name": "write_file", "arguments": {"path": "a", "content": "x"}},
                        ]
                    },
                    {"text": "done"},
                ],
                "answers": {"Colour?": "teal"},
            }
        )
    )
    result = subprocess.run(
        [
            *(sys.executable, "-m", "agentrt", "lab", "go", "--replay", str(replay)),
            *("--json", "--cause", "pause"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["violations"] == []
    assert data["points_checked"] == len(data["boundaries"])
    # The answer the file carries is the one given, and a confirmation named by its prompt
    # takes the answer given for it.
    answers = replay_answers(replay)
    assert answers == {"Colour?": "teal"}
    denied = Conversation(
        "go",
        f"replay:{replay}",
        {**answers, f"write 1 bytes to {tmp_path / 'lab' / 'work' / 'a'}": "deny"},
    )
    base, files = Lab(denied, causes=("pause",)).baseline(tmp_path / "lab")
    results = {e.name: e.preview for e in base.events if isinstance(e, ToolResultEvent)}
    assert results == {"ask_user": "teal", "write_file": "denied by the user"}
    assert files == {}


def test_the_heatmap_draws_a_user_cancel_as_discarded_not_as_free(tmp_path: Path) -> None:
    import matplotlib.image

    from agentrt.apps.lab import DISCARDED_COLOUR
    from agentrt.apps.lab import write_heatmap

    report = Lab(Conversation("write a.txt hi"), causes=("user_cancel", "pause")).run()
    png = tmp_path / "cost.png"
    write_heatmap(report, png)
    pixels = matplotlib.image.imread(png)[:, :, :3]
    grey = tuple(int(DISCARDED_COLOUR[i : i + 2], 16) / 255 for i in (1, 3, 5))
    discarded = (abs(pixels - grey) < 0.01).all(axis=2).sum()
    # Every user-cancel cell of each of the four panels is that colour: a large block.
    assert discarded > 2000


def test_a_user_cancel_with_undo_leaves_the_folder_as_before_the_run_at_every_boundary() -> None:
    report = Lab(Conversation(TOUR, answers={"Name?": "Ada"}), causes=("user_cancel_undo",)).run()
    assert report.violations == []
    assert len(report.points) == len(report.boundaries)
    assert all(not p.kept for p in report.points)


def test_a_planted_bug_an_undo_that_puts_nothing_back_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def undo_nothing(self: Checkpoints, session: str, calls: Any, **options: Any) -> UndoResult:
        return UndoResult((), ())

    monkeypatch.setattr(Checkpoints, "undo", undo_nothing)
    report = Lab(Conversation("write a.txt hi", answers={}), causes=("user_cancel_undo",)).run()
    rules = {v.rule for v in report.violations}
    assert rules == {"undo"}
    assert any("still holds a.txt" in v.detail for v in report.violations)


def test_a_conversation_that_compacts_is_swept_and_keeps_every_invariant() -> None:
    """A small window over an earlier conversation: the run compacts twice, and a pause or a
    crash at every point (during a compaction too) loses nothing and duplicates nothing."""
    conversation = Conversation(
        "write a.txt hi; sh echo x >> log; stream 5", context_window=400, earlier=20
    )
    report = Lab(conversation, causes=("pause", "crash")).run()
    compactions = [b for b in report.boundaries if b.name == "CompactionEvent"]
    assert len(compactions) == 2
    # The entry's commit is a boundary of its own, just before its event.
    for event in compactions:
        assert report.boundaries[event.index - 1].label[:3] == ("store", "store.save", "note")
    assert len(report.points) == 2 * len(report.boundaries)
    assert report.violations == []


def test_a_write_is_named_by_what_it_changed_not_by_when_its_question_came() -> None:
    # The calls of a round run side by side, so their questions come in any order: a write
    # is named by the prompt or the call it is about, never by "the second question".
    colour = QuestionTrace("q-1", QuestionState.WAITING, 1.0)
    name = QuestionTrace("q-2", QuestionState.WAITING, 2.0)
    prompts = {"q-1": "Colour?", "q-2": "Name?"}
    asked = TaskRecord(
        "chat-n",
        "go",
        (),
        question=SavedQuestion("call_1_0", "Colour?", id="q-1"),
        questions=(colour, name),
    )
    answered = attrs.evolve(colour, state=QuestionState.ANSWERED, at=3.0)
    only_answer = attrs.evolve(asked, questions=(answered, name))
    assert _changed(asked, only_answer, prompts) == "questions Colour? answered"
    # Recorded with the next question shown, the answer is not named: which answer goes
    # with which question is the order they came in.
    shown = attrs.evolve(
        only_answer,
        question=SavedQuestion("call_1_1", "Name?", id="q-2"),
        questions=(answered, name),
    )
    assert _changed(asked, shown, prompts) == "question call_1_1 Name?"
    # A cleared question is named by its call: which of a call's questions is answered
    # last, and so cleared rather than replaced, is the order too.
    assert (
        _changed(shown, attrs.evolve(shown, question=None), prompts) == "question cleared call_1_1"
    )
    # A question's first record comes before the question is posted: no prompt is known yet.
    new = QuestionTrace("q-3", QuestionState.WAITING, 4.0)
    assert _changed(shown, attrs.evolve(shown, questions=(answered, name, new)), prompts) == (
        "questions waiting"
    )


def test_the_sweep_starts_from_a_path_two_runs_in_a_row_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rare order of side-by-side calls makes a write most runs do not: a baseline on that
    # path would leave its points a boundary they seldom meet. Runs: rare, common, common.
    def trace(*labels: tuple[str, str, str, int]) -> Any:
        made = lab._Trace()
        made.boundaries.extend(labels)
        return made

    common = [("store", "store.save_fields", "question cleared call_1_0", 1)]
    rare = [("store", "store.save_fields", "questions waiting", 3)]
    runs = iter([trace(*rare), trace(*common), trace(*common)])
    monkeypatch.setattr(Lab, "baseline", lambda self, root: (next(runs), {}))
    chosen, _ = Lab(Conversation("ask Name?"))._common_baseline(tmp_path)
    assert chosen.boundaries == common
    assert next(runs, None) is None  # three runs, not more
    # Never two alike: the last of BASELINE_TRIES runs is taken.
    runs = iter([trace(*rare) if n % 2 else trace(*common) for n in range(lab.BASELINE_TRIES)])
    chosen, _ = Lab(Conversation("ask Name?"))._common_baseline(tmp_path)
    assert chosen.boundaries == (rare if (lab.BASELINE_TRIES - 1) % 2 else common)
    assert next(runs, None) is None

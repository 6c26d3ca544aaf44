"""Transitions for what comes from the daemon: the link going up and down, and its frames.

A list the user asked for (`/pending`, `/sessions`) opens when its last page
arrives, replacing the one overlay field; it is not opened over a popup, which
holds a choice about the run the user has not made yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrt import Outcome
from agentrt import describe_end
from agentrt import describe_resume
from agentrt import may_have_run
from agentrt.protocol.frames import Ack
from agentrt.protocol.frames import AskFrame
from agentrt.protocol.frames import AskWithdrawn
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import CompactionFrame
from agentrt.protocol.frames import DaemonAction
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import DaemonRequest
from agentrt.protocol.frames import DaemonStatus
from agentrt.protocol.frames import EndedFrame
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import ModelList
from agentrt.protocol.frames import ModelsAction
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import PendingPreview
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import PendingTask
from agentrt.protocol.frames import ReasoningFrame
from agentrt.protocol.frames import SessionList
from agentrt.protocol.frames import SessionMessage
from agentrt.protocol.frames import SessionMessages
from agentrt.protocol.frames import SessionsAction
from agentrt.protocol.frames import SessionsRequest
from agentrt.protocol.frames import TaskFrame
from agentrt.protocol.frames import TextFrame
from agentrt.protocol.frames import ToolCallDeltaFrame
from agentrt.protocol.frames import ToolCallFrame
from agentrt.protocol.frames import ToolProgressFrame
from agentrt.protocol.frames import ToolResultFrame
from agentrt.protocol.frames import TurnList
from agentrt.protocol.frames import Undone
from agentrt.protocol.frames import UsageFrame
from agentrt.protocol.frames import VerifyFrame
from agentrt.protocol.frames import Welcome
from agentrt.vocab.clamp import preview
from agentrt.vocab.events import describe_compaction

from ._state import SESSIONS_PAGE
from ._state import SESSIONS_SHOWN
from ._state import Action
from ._state import EndedPopup
from ._state import EntryKind
from ._state import ModelPicker
from ._state import Notice
from ._state import NoticeLevel
from ._state import PendingPicker
from ._state import Picker
from ._state import Popup
from ._state import Quit
from ._state import QuitPopup
from ._state import RunPhase
from ._state import Send
from ._state import SessionsPicker
from ._state import SetInput
from ._state import StopPopup
from ._state import TuiState
from ._transitions_commands import want_preview


def connected(state: TuiState, welcome: Welcome) -> list[Action]:
    """The daemon answered `hello`; after a lost connection, ask what was left pending."""
    again = state.was_connected
    state.connected = True
    state.was_connected = True
    state.link_error = None
    state.starting_daemon = False
    state.retry_at = None
    state.gave_up = False
    state.window = welcome.window
    # How the daemon is: an HTTP API it could not serve is said once (`on_daemon_status`).
    status = Send(DaemonRequest(DaemonAction.STATUS))
    if not again:
        return [status]
    if state.input.strip() and state.send_when_connected is None:
        # A message the lost daemon may not have received is back in the input box: the
        # notice that said so is replaced, so this one says it again.
        state.info(
            "Reconnected to the daemon. Your message is still in the input box: Enter sends it"
        )
    else:
        state.info("Reconnected to the daemon")
    state.quiet_pending = True
    actions: list[Action] = [status, Send(PendingRequest(PendingAction.LIST))]
    if state.session is not None:
        # The session's tokens as the store kept them (a restarted daemon's too).
        actions.append(Send(SessionsRequest(SessionsAction.SHOW, state.session, limit=1)))
    return actions


def on_daemon_status(state: TuiState, frame: DaemonStatus) -> list[Action]:
    """The daemon's status, asked for on connecting: a failed HTTP API is said, once."""
    if frame.http_error is None or state.http_error_of == frame.pid:
        return []
    state.http_error_of = frame.pid
    text = (
        f"HTTP API not started: {frame.http_error}; the socket is served, so this window "
        "works ('agentrt daemon status' shows it)"
    )
    state.add(EntryKind.ERROR, text)
    state.error(text)
    return []


def starting_daemon(state: TuiState, where: str) -> list[Action]:
    """No daemon answered: one is being started for this window."""
    state.starting_daemon = True
    state.retry_at = None
    starting = f"Starting the daemon on {where}..."
    notice = state.notice
    if state.was_connected and notice is not None and notice.text.startswith("Lost the daemon"):
        # What was lost, and what is kept, stays on screen while the daemon starts.
        state.notice = Notice(f"{notice.text} {starting}", notice.level)
    else:
        state.info(starting)
    return []


def daemon_started(state: TuiState, text: str) -> list[Action]:
    """A daemon was started for this window: said in the notice box and kept in the transcript."""
    state.starting_daemon = False
    state.add(EntryKind.INFO, text)
    state.info(text)
    return []


def gave_up_starting(state: TuiState, text: str, retry_at: float) -> list[Action]:
    """The daemon failed to start too often: the window starts it no more, and says why.

    It still looks for a daemon (one started by hand) at `retry_at` and after.
    """
    state.connected = False
    state.starting_daemon = False
    state.gave_up = True
    state.link_error = text
    state.retry_at = retry_at
    state.add(EntryKind.ERROR, text)
    state.error(text)
    return []


def connect_failed(state: TuiState, reason: str, retry_at: float) -> list[Action]:
    """A connection attempt failed; the next one is due at `retry_at`.

    Once the window gave up starting the daemon, the notice keeps saying why.
    """
    state.connected = False
    state.starting_daemon = False
    state.retry_at = retry_at
    if state.gave_up:
        return []
    state.link_error = reason
    what = "Still cannot reach the daemon" if state.was_connected else "Cannot reach the daemon"
    state.error(f"{what}: {reason}")
    return []


def disconnected(state: TuiState, reason: str, retry_at: float | None = None) -> list[Action]:
    """The connection to the daemon is gone: the run (if any) is over for this window.

    Nothing typed is lost: a message the daemon may not have received, the draft a
    question had put aside, and a typed (unmasked) answer all come back to the input box.
    """
    state.connected = False
    state.link_error = reason
    state.retry_at = retry_at
    run, state.run = state.run, None
    state.overlay = None
    state.quiet_pending = False
    state.sessions_pages = []
    state.history_for = None
    pieces: list[str] = []
    unsent = run.text if run is not None and run.task is None else None
    if unsent:
        pieces.append(unsent)
    if state.asks:
        pieces += [state.draft or "", "" if state.masked else state.input]
        state.asks.clear()
        state.draft = None
    else:
        pieces.append(state.input)
    text = "\n".join(piece for piece in pieces if piece)
    actions: list[Action] = []
    if text != state.input:
        state.input = text
        actions.append(SetInput(text))
    words = [f"Lost the daemon: {reason}. Reconnecting..."]
    if run is not None and run.task is not None:
        # The daemon keeps an interrupted task; its session must be resumed, not continued.
        state.session = None
        state.add(EntryKind.ERROR, "Interrupted: lost the daemon; the task is kept", run.task)
        words.append("The run's task is kept: /pending resumes it once reconnected.")
    elif unsent:
        words.append("Your message may not have reached it: it is back in the input box.")
    state.error(" ".join(words))
    if state.quit_after_run:
        state.quit_after_run = False
        actions.append(Quit())
    return actions


def _ours(state: TuiState, task: str | None) -> bool:
    current = state.run.task if state.run is not None else None
    return task is None or current is None or task == current


def on_task(state: TuiState, frame: TaskFrame) -> list[Action]:
    """A `task` frame: the run's hash; a cancel held until now is sent."""
    run = state.run
    if run is None or run.task is not None:
        return []
    run.task = frame.task_hash
    run.session = frame.session_id
    state.session = frame.session_id
    if frame.resumed:
        state.add(
            EntryKind.INFO,
            describe_resume(frame.kept_calls, frame.rerun_calls, frame.regenerated_words),
            frame.task_hash,
        )
    if run.held_cancel is not None:
        cause = run.held_cancel
        run.held_cancel = None
        run.sent_cancel = cause
        run.phase = RunPhase.STOPPING
        return [Send(Cancel(frame.task_hash, cause))]
    run.phase = RunPhase.RUNNING
    return []


def on_text(state: TuiState, frame: TextFrame) -> list[Action]:
    """Streamed assistant text."""
    return _stream(state, frame, EntryKind.ASSISTANT)


def on_reasoning(state: TuiState, frame: ReasoningFrame) -> list[Action]:
    """Streamed reasoning of the model: a dimmed block of its own, apart from the reply."""
    return _stream(state, frame, EntryKind.REASONING)


def _stream(state: TuiState, frame: TextFrame | ReasoningFrame, kind: EntryKind) -> list[Action]:
    """Add a streamed piece to the block of `kind` it continues, or start one.

    A subagent's text gets its own block, labelled when shown, so it never runs
    into the main reply.
    """
    if not frame.text or not _ours(state, frame.task_hash):
        return []
    state.mark_shown()
    last = state.transcript[-1] if state.transcript else None
    if (
        last is not None
        and last.kind is kind
        and last.task == frame.task_hash
        and last.agent == frame.agent
    ):
        last.parts.append(frame.text)
        return []
    state.add(kind, frame.text, frame.task_hash)
    state.transcript[-1].agent = frame.agent
    return []


def _short(arguments: dict[str, Any]) -> str:
    text = " ".join(f"{key}={value!r}" for key, value in arguments.items())
    return text if len(text) <= 200 else text[:197] + "..."


def on_tool_call(state: TuiState, frame: ToolCallFrame) -> list[Action]:
    """A tool call is about to run."""
    if not _ours(state, frame.task_hash):
        return []
    state.mark_shown()
    who = f"[{frame.agent}] " if frame.agent else ""
    warning = may_have_run(frame.attempt)
    note = f" ({warning})" if warning else ""
    state.add(
        EntryKind.TOOL_CALL,
        f"{who}{frame.name} {_short(frame.arguments)}{note}",
        frame.task_hash,
    )
    return []


def on_tool_call_delta(state: TuiState, frame: ToolCallDeltaFrame) -> list[Action]:
    """The model is still writing a tool call: the call is shown when it runs."""
    return []


def on_tool_result(state: TuiState, frame: ToolResultFrame) -> list[Action]:
    """A tool call finished."""
    if not _ours(state, frame.task_hash):
        return []
    state.mark_shown()
    kind = EntryKind.TOOL_RESULT if frame.ok else EntryKind.ERROR
    state.add(kind, f"{frame.name}: {frame.preview}".rstrip(), frame.task_hash)
    run = state.run
    if frame.name in _CHANGES_FILES and run is not None and run.session is not None:
        # How many files the run changed so far: the stop popup offers to put them back.
        ask = SessionsRequest(SessionsAction.UNDO, run.session, task=frame.task_hash, dry_run=True)
        return [Send(ask)]
    return []


def on_tool_progress(state: TuiState, frame: ToolProgressFrame) -> list[Action]:
    """A tool call in flight says how far it has got: a line of the transcript."""
    if not _ours(state, frame.task_hash):
        return []
    state.mark_shown()
    state.add(EntryKind.INFO, progress_text(frame), frame.task_hash)
    return []


def progress_text(frame: ToolProgressFrame) -> str:
    """``NAME: 2/5 (40%) receiving objects``, or ``NAME: 2`` with no total."""
    done = f"{frame.progress:g}"
    if frame.total:
        done += f"/{frame.total:g} ({frame.progress / frame.total:.0%})"
    return f"{frame.name}: {done} {frame.message}".rstrip()


#: The tools whose calls may change files (a subagent's too): after each, the stop popup's
#: count of the files the run changed is asked for again.
_CHANGES_FILES: frozenset[str] = frozenset({"write_file", "edit_file", "shell", "spawn"})


def on_usage(state: TuiState, frame: UsageFrame) -> list[Action]:
    """Token usage of one model response."""
    state.input_tokens += frame.input_tokens
    state.output_tokens += frame.output_tokens
    state.cached_tokens += frame.cache_read_tokens
    state.reasoning_tokens += frame.reasoning_tokens
    return []


def on_compaction(state: TuiState, frame: CompactionFrame) -> list[Action]:
    """The conversation was compacted: said in the transcript, where it happened."""
    who = f"{frame.agent}: " if frame.agent else ""
    state.add(EntryKind.INFO, f"({who}{describe_compaction(frame.summarised)})", frame.task_hash)
    return []


def on_verify(state: TuiState, frame: VerifyFrame) -> list[Action]:
    """The result of checking a typed password, in the notice box."""
    if frame.ok:
        state.info("Password accepted")
        return []
    # The daemon's own words only when they say more than "wrong password".
    message = frame.message.strip()
    what = "Wrong password" if not message or "wrong password" in message.lower() else message
    if frame.attempts_left > 0:
        tries = "try" if frame.attempts_left == 1 else "tries"
        state.error(f"{what} ({frame.attempts_left} {tries} left)")
    else:
        state.error(f"{what}: no tries left, the operation was denied")
    return []


def on_ask(state: TuiState, frame: AskFrame) -> list[Action]:
    """A question for this window: a confirmation, a question, a secret or a password.

    The diff of a file change it asks about goes to the transcript, in full and
    coloured, right above the question, where it can be scrolled back.
    """
    state.mark_shown()
    if frame.diff:
        state.add(EntryKind.DIFF, frame.diff, frame.task)
    return state.push_ask(frame)


def on_ask_withdrawn(state: TuiState, frame: AskWithdrawn) -> list[Action]:
    """The daemon took a question back (its run stopped, or its timeout fired).

    The reason is the daemon's sentence (``question q-... was withdrawn: its run
    was paused``), the one a late answer to it would be refused with.
    """
    for index, ask in enumerate(state.asks):
        if ask.id == frame.id:
            reason = frame.reason
            state.info(reason[:1].upper() + reason[1:] if reason else "Question withdrawn")
            return state.pop_ask(index)
    return []


def on_ended(state: TuiState, frame: EndedFrame) -> list[Action]:
    """The run ended: say how, and what became of its pending task."""
    run = state.run
    if run is None or (run.task is not None and frame.task_hash != run.task):
        return []
    state.run = None
    quitting = isinstance(state.overlay, QuitPopup)
    interrupted_choice = isinstance(state.overlay, StopPopup | QuitPopup)
    state.close(StopPopup, QuitPopup)
    actions: list[Action] = []
    for index in reversed(range(len(state.asks))):
        if state.asks[index].task in (None, frame.task_hash):
            actions += state.pop_ask(index)
    line, level = _ended_line(frame)
    state.add(
        EntryKind.ERROR if level is NoticeLevel.ERROR else EntryKind.INFO, line, frame.task_hash
    )
    if run.undo_after:
        # Stopped to put its files back: that task's changes only.
        undo = SessionsRequest(SessionsAction.UNDO, frame.session_id, task=frame.task_hash)
        actions.append(Send(undo))
    if interrupted_choice:
        # The popup does not just vanish under the user's hand: it says why.
        state.overlay = EndedPopup(f"The run ended before you chose: {line}", quitting)
    if frame.pending_kept:
        # The task stays resumable; the next message must not continue its session.
        state.session = None
        state.notice = Notice(
            f"{line}. Its task is kept: type /pending to resume it "
            "(the next message starts a new session)",
            level,
        )
    elif level is NoticeLevel.ERROR:
        state.notice = Notice(line, level)
    elif run.stopping:
        state.notice = None
    if state.quit_after_run:
        state.quit_after_run = False
        actions.append(Quit())
    return actions


def _ended_line(frame: EndedFrame) -> tuple[str, NoticeLevel]:
    level = NoticeLevel.ERROR if frame.outcome is Outcome.FAILED else NoticeLevel.INFO
    return describe_end(frame).title, level


def _is_current_run(state: TuiState, task: PendingTask) -> bool:
    run = state.run
    if run is None:
        return False
    return (run.session is not None and task.session == run.session) or (
        run.task is not None and task.task == run.task
    )


def on_pending(state: TuiState, frame: PendingList) -> list[Action]:
    """A page of the `/pending` list arrived; the list is shown once the last one has.

    The run in progress is not one of its tasks.
    """
    state.pending_pages += [task for task in frame.tasks if not _is_current_run(state, task)]
    if frame.next is not None:
        return [Send(PendingRequest(PendingAction.LIST, cursor=frame.next))]
    tasks, state.pending_pages = state.pending_pages, []
    if state.quiet_pending:
        state.quiet_pending = False
        if tasks:
            some = "1 interrupted task is" if len(tasks) == 1 else f"{len(tasks)} tasks are"
            state.info(f"Reconnected to the daemon. {some} kept: type /pending to resume")
        return []
    if not tasks:
        state.close(PendingPicker)
        state.info("No paused tasks in this window")
        return []
    # What a resume will do is asked afresh each time: a task may have run again meanwhile.
    state.previews.clear()
    _open_list(state, PendingPicker(tuple(tasks)))
    return want_preview(state)


def on_pending_preview(state: TuiState, frame: PendingPreview) -> list[Action]:
    """What resuming a task of the `/pending` list will do: shown while it is selected."""
    if frame.session in state.previews:
        state.previews[frame.session] = frame.preview
    return []


def on_sessions(state: TuiState, frame: SessionList) -> list[Action]:
    """A page of the `/sessions` list; the picker opens once enough (or all) have come.

    The session of the run in progress is not one of them.
    """
    running = state.run.session if state.run is not None else None
    state.sessions_pages += [item for item in frame.sessions if item.session != running]
    if frame.next is not None and len(state.sessions_pages) < SESSIONS_SHOWN:
        return [Send(SessionsRequest(SessionsAction.LIST, limit=SESSIONS_PAGE, cursor=frame.next))]
    items, state.sessions_pages = state.sessions_pages[:SESSIONS_SHOWN], []
    if not items:
        state.close(SessionsPicker)
        state.info("No earlier conversations yet: the next message starts one")
        return []
    _open_list(state, SessionsPicker(tuple(items)))
    return []


def on_models(state: TuiState, frame: ModelList) -> list[Action]:
    """The configured models: the `/model` picker opens, or the switch it asked for is done."""
    asked, state.models_asked = state.models_asked, None
    if frame.session is not None and frame.session == state.session:
        state.model = frame.current
    if asked is ModelsAction.SET and frame.session is not None:
        # A conversation not started yet was made by the switch: the next message goes there.
        if state.session is None and state.run is None:
            state.session = frame.session
        if frame.session == state.session:
            state.model = frame.current
            state.info(f"Model {frame.current}: this conversation's next message goes to it")
        return []
    if not frame.models:
        state.info("The daemon offers no models to choose from")
        return []
    current = frame.current if state.session is not None else state.model or frame.current
    index = next((n for n, m in enumerate(frame.models) if m.name == current), 0)
    _open_list(state, ModelPicker(frame.models, index, current))
    return []


def _open_list(state: TuiState, picker: Picker) -> None:
    """Open a list that arrived, in place of whatever overlay is open, except a popup."""
    if isinstance(state.overlay, Popup):
        name = (
            "/pending"
            if isinstance(picker, PendingPicker)
            else "/sessions"
            if isinstance(picker, SessionsPicker)
            else "/model"
        )
        state.info(f"The {name} list came while a popup was open: type {name} again to see it")
        return
    state.overlay = picker


def on_session_messages(state: TuiState, frame: SessionMessages) -> list[Action]:
    """The last messages of the conversation being continued: shown in the transcript."""
    if frame.session.session == state.session:
        state.count_tokens(frame.usage)
    if frame.session.session != state.history_for:
        return []
    state.history_for = None
    if frame.messages and frame.messages[0].seq > 0:
        state.add(EntryKind.INFO, f"(the {frame.messages[0].seq} earlier messages are not shown)")
    for message in frame.messages:
        for kind, text in _history_entries(message):
            state.add(kind, text)
    return []


def _history_entries(message: SessionMessage) -> list[tuple[EntryKind, str]]:
    """A stored message as the entries a live run would have shown."""
    if message.role == "user":
        return [(EntryKind.USER, message.content)]
    if message.summarised:
        return [(EntryKind.INFO, f"({describe_compaction(message.summarised)})")]
    if message.role == "tool":
        # The preview a live run's tool_result showed, not the whole saved result.
        shown = preview(message.content)
        return [(EntryKind.TOOL_RESULT, f"{message.name or 'result'}: {shown}".rstrip())]
    if message.role != "assistant":
        return []
    entries = [(EntryKind.ASSISTANT, message.content)] if message.content.strip() else []
    for call in message.tool_calls:
        arguments = call.get("arguments")
        shown = _short(arguments) if isinstance(arguments, dict) else ""
        entries.append((EntryKind.TOOL_CALL, f"{call.get('name', 'tool')} {shown}".rstrip()))
    return entries


def on_turns(state: TuiState, frame: TurnList) -> list[Action]:
    """The turns `/rewind` asked for: numbered in the transcript, for `/rewind N`."""
    if frame.session != state.session:
        return []
    state.turns = tuple(turn.seq for turn in frame.turns)
    if not frame.turns:
        state.info("This session has no turns yet")
        return []
    lines = ["Turns of this session (/rewind N goes back to turn N):"]
    for number, turn in enumerate(frame.turns, start=1):
        words = turn.text.splitlines()[0] if turn.text else ""
        words = words if len(words) <= 60 else words[:57] + "..."
        after = f"{turn.files} file{'' if turn.files == 1 else 's'} to put back"
        lines.append(f"  {number}. {words}  ({after})")
    state.add(EntryKind.INFO, "\n".join(lines))
    return []


def on_undone(state: TuiState, frame: Undone) -> list[Action]:
    """What `/undo` or `/rewind N` did, or the files changed since that stopped it; or, to a
    dry run, how many files the running run changed so far."""
    if frame.dry_run:
        run = state.run
        if run is not None and run.task is not None and run.task == frame.task:
            run.files = len(frame.restored)
        return []
    if frame.conflicts and not frame.done:
        lines = [
            f"{len(frame.conflicts)} file(s) changed since the run; nothing was put back:",
            *(f"  {path}" for path in frame.conflicts),
            "Type the command again with force (/undo force, /rewind N force) to put them "
            "back, their newer content kept beside",
        ]
        state.add(EntryKind.INFO, "\n".join(lines))
        state.error(f"{len(frame.conflicts)} file(s) changed since the run: nothing was undone")
        return []
    if not frame.restored and not frame.skipped:
        state.info("Nothing to undo")
        return []
    lines = [f"Put back {len(frame.restored)} file(s):"]
    for path in frame.restored:
        kept = frame.kept.get(path)
        lines.append(f"  {path}" + (f" (its newer content kept in {kept})" if kept else ""))
    lines += [f"  a call could not be undone: {why}" for why in frame.skipped.values()]
    state.add(EntryKind.INFO, "\n".join(lines))
    state.info(f"Put back {len(frame.restored)} file(s)")
    return []


def on_error(state: TuiState, frame: ErrorFrame) -> list[Action]:
    """An `error` frame: shown in the notice box; a run refused before it started is forgotten."""
    run = state.run
    asked = next((session for session, said in state.previews.items() if said is None), None)
    if frame.ref == "pending" and asked is not None:
        # The daemon answers in the order asked: this refuses the preview asked for first
        # (its task went meanwhile), not a resume sent after it.
        del state.previews[asked]
        state.error(frame.message)
        return []
    if run is not None and run.task is None and frame.ref in ("run", "pending"):
        state.run = None
    if frame.ref == "models":
        state.models_asked = None
    if frame.ref == "sessions" and state.history_for is not None:
        # The conversation to continue is gone (removed meanwhile): start afresh instead.
        state.session = state.history_for = None
    state.error(frame.message)
    return []


def on_ack(state: TuiState, frame: Ack) -> list[Action]:
    """A request was carried out; only a `/compact` has something to show (how many)."""
    if frame.ref == "sessions" and frame.session is not None and frame.session == state.compacting:
        state.compacting = None
        state.add(EntryKind.INFO, f"({frame.detail})")
    return []


_HANDLERS: dict[type[Any], Callable[[TuiState, Any], list[Action]]] = {
    Welcome: connected,
    TaskFrame: on_task,
    TextFrame: on_text,
    ReasoningFrame: on_reasoning,
    ToolCallDeltaFrame: on_tool_call_delta,
    ToolCallFrame: on_tool_call,
    ToolResultFrame: on_tool_result,
    ToolProgressFrame: on_tool_progress,
    UsageFrame: on_usage,
    CompactionFrame: on_compaction,
    VerifyFrame: on_verify,
    EndedFrame: on_ended,
    AskFrame: on_ask,
    AskWithdrawn: on_ask_withdrawn,
    PendingList: on_pending,
    PendingPreview: on_pending_preview,
    SessionList: on_sessions,
    SessionMessages: on_session_messages,
    TurnList: on_turns,
    Undone: on_undone,
    DaemonStatus: on_daemon_status,
    ModelList: on_models,
    Ack: on_ack,
    ErrorFrame: on_error,
}


def on_frame(state: TuiState, frame: DaemonFrame) -> list[Action]:
    """Any frame from the daemon, dispatched by its type."""
    return _HANDLERS[type(frame)](state, frame)

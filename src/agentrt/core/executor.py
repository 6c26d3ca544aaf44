"""The executor: starts runs, makes their task hashes, applies cancels with causes.

`Executor.run` makes the task hash and registers the run's cancel *before* the
run emits its first event (which carries the hash), so a cancel works from the
first event on. Every run ends with exactly one `RunEnded` event. How it ended
(`Outcome`) and, when it was stopped, why (`Cause`, said by `_ending_cause`)
decide what happens to the session's pending task: `agentrt.vocab.terms.SETTLE`
maps the pair to a `Settle`, and `Executor._conclude` does what it says.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from ..agent.checkpoint import Turn
from ..agent.checkpoint import UndoResult
from ..agent.checkpoint import undo_note
from ..agent.compaction import Joined
from ..agent.compaction import compaction_of
from ..agent.config import AgentConfig
from ..agent.loop import AgentRun
from ..agent.loop import Emit
from ..agent.tools import records_start
from ..models.catalog import ModelCatalog
from ..models.catalog import ModelEntry
from ..models.messages import Message
from ..models.messages import Model
from ..models.messages import ModelError
from ..models.messages import Role
from ..models.messages import model_view
from ..models.messages import seen_indices
from ..store import NoUserMessageError
from ..store import Queued
from ..store import Store
from ..store import StoreError
from ..store import TaskExistsError
from ..store import TaskTakenError
from ..store.ledger import entries_of
from ..store.ledger import resume_counts
from ..store.ledger import round_ledger
from ..store.ledger import thrown_away
from ..store.ledger import with_unseen_entries
from ..store.record import AnswerEffects
from ..store.record import SavedQuestion
from ..store.record import TaskRecord
from ..store.record import apply_answer
from ..store.record import reissue_note
from ..vocab.events import Outcome
from ..vocab.events import RunEnded
from ..vocab.events import TaskStarted
from ..vocab.locations import StrPath
from ..vocab.questions import QuestionTrace
from ..vocab.questions import trace_of
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from ..vocab.stops import Interruption
from ..vocab.stops import StopKind
from ..vocab.terms import SETTLE
from ..vocab.terms import Settle
from ..vocab.terms import TaskStatus
from ..vocab.unique import random_hex
from .cause import Cause
from .cause import CauseScope
from .cause import stop_cause
from .context import RequestContext
from .context import bind_context
from .errors import BadAnswerError as BadAnswerError
from .errors import BadSessionIdError as BadSessionIdError
from .errors import BadWorkdirError as BadWorkdirError
from .errors import ExecutorError as ExecutorError
from .errors import LateAnswerError as LateAnswerError
from .errors import ModelNotConfiguredError as ModelNotConfiguredError
from .errors import NoPendingTaskError as NoPendingTaskError
from .errors import NoSuchTurnError as NoSuchTurnError
from .errors import NothingToReplaceError as NothingToReplaceError
from .errors import NotOwnerError as NotOwnerError
from .errors import PendingTaskExistsError as PendingTaskExistsError
from .errors import SessionBusyError as SessionBusyError
from .errors import UnknownModelError as UnknownModelError
from .errors import UnknownSessionError as UnknownSessionError
from .errors import UnknownTaskError as UnknownTaskError
from .pending import Registry
from .process import token_alive
from .process import token_pid
from .tracing import Attribute
from .tracing import span

log = logging.getLogger("agentrt.executor")

#: How long the bookkeeping after a cancelled run may take before it is abandoned.
_CLEANUP_SECONDS = 10.0
_MAX_SESSION_ID = 128


def check_workdir(path: StrPath) -> Path:
    """`path` resolved, if it is an existing folder; raise `BadWorkdirError` saying why not."""
    folder = Path(path)
    if not folder.is_absolute():
        raise BadWorkdirError(f"the working directory {str(path)!r} must be an absolute path")
    folder = folder.resolve()
    if not folder.is_dir():
        raise BadWorkdirError(f"the working directory {str(path)!r} is not an existing folder")
    return folder


def check_session_id(session_id: str) -> str:
    """Return `session_id` if usable; raise `BadSessionIdError` saying why not."""
    if not session_id or len(session_id) > _MAX_SESSION_ID:
        raise BadSessionIdError(f"a session id must be 1 to {_MAX_SESSION_ID} characters")
    if not session_id.isprintable() or any(c.isspace() for c in session_id):
        raise BadSessionIdError(
            f"session id {session_id!r} must be printable and contain no spaces"
        )
    return session_id


def new_task_hash() -> str:
    """A fresh task hash: 12 hex digits, unpredictable (`agentrt.vocab.unique`)."""
    return random_hex(6)


@record
class TaskInfo:
    """A running task: what a cancel must name, and who may cancel it."""

    task_hash: str
    session_id: str
    owner: object = attrs.field(repr=False)
    window_hash: str | None


@mutable(eq=False)
class _Running:
    info: TaskInfo
    scope: CauseScope = attrs.field(factory=CauseScope)
    #: Set when the task was discarded while this run worked on it.
    discarded: bool = False
    #: The model the run talks to: its session's.
    model: Model | None = None
    #: Set once the run is over and its session free (see `Executor.undo` of a stopped task).
    over: trio.Event = attrs.field(factory=trio.Event)


@record
class ExecutorStatistics:
    """Running tasks, and sessions with tools allowed for the session."""

    running: int
    sessions_with_allowances: int


@mutable(eq=False)
class Executor:
    """Runs sessions' tasks against a registry, store and configuration.

    Each run talks to its session's model: the one chosen for the session
    (`choose_model`, kept in the store with it), else the default, `model`
    (which may be replaced: the next run of a session on the default uses it).
    The models a session may choose are `catalog`'s (the default alone when
    none is given).
    """

    registry: Registry
    store: Store
    model: Model
    config: AgentConfig
    catalog: ModelCatalog | None = attrs.field(default=None, kw_only=True)
    _tasks: dict[str, _Running] = attrs.field(factory=dict, init=False)
    _sessions: dict[str, _Running] = attrs.field(factory=dict, init=False)
    _allow: dict[str, set[str]] = attrs.field(factory=dict, init=False)
    #: The sessions whose run ended with its task kept while the write that marks it stopped
    #: is awaited (`_conclude`), each with how many such writes it awaits (`held`).
    _stopping: dict[str, int] = attrs.field(factory=dict, init=False)
    #: What this process's runs are recorded with as their runner (the store says).
    _token: str = attrs.field(init=False)
    _catalog: ModelCatalog = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._token = self.store.runner
        if self.catalog is None:
            self.catalog = ModelCatalog.of(self.model, self.model.name)
        self._catalog = self.catalog

    # -- models -----------------------------------------------------------

    def models(self) -> list[ModelEntry]:
        """The configured models, the default first, each saying whether it can be used now."""
        self._catalog.use_default(self.model)
        return self._catalog.entries()

    async def session_model(self, session_id: str) -> str:
        """The name of the model `session_id` runs with: its chosen one, else the default."""
        check_session_id(session_id)
        chosen = await self.store.session_model(session_id)
        return chosen if chosen is not None else self._catalog.default

    async def choose_model(
        self, session_id: str, name: str, *, window_hash: str | None = None
    ) -> None:
        """Make `name` the model of `session_id` from its next run (or resume) on.

        Kept in the store with the session, so another front-end, a resume and
        a restart use it too; a session with no message yet is owned by
        `window_hash`. A run going on keeps the model it started with. Raises
        `UnknownModelError` for a model that is not configured and
        `ModelNotConfiguredError` for one that cannot be used now (no key).
        """
        check_session_id(session_id)
        self._catalog.use_default(self.model)
        self._catalog.ready(name)
        await self.store.set_session_model(session_id, name, window_hash=window_hash)

    async def _model_for(self, session_id: str) -> Model:
        """The model a run of `session_id` talks to, checked ready (`ModelNotConfiguredError`)."""
        return self._ready_model(session_id, await self.store.session_model(session_id))

    def _ready_model(self, session_id: str, chosen: str | None) -> Model:
        """The model `chosen` for `session_id` (None: the default), checked ready.

        Called in the store's thread too (a resume's claim): the catalog makes each
        model once whatever thread asks.
        """
        # The default is whatever model the executor has now.
        self._catalog.use_default(self.model)
        try:
            return self._catalog.ready(chosen)
        except UnknownModelError:
            raise ModelNotConfiguredError(
                f"the model chosen for session {session_id}, {chosen}, is not configured any "
                f"more; choose another one (the models are: {', '.join(self._catalog.names)})"
            ) from None

    # -- starting ---------------------------------------------------------

    async def run(
        self,
        session_id: str,
        text: str,
        *,
        owner: object,
        emit: Emit,
        window_hash: str | None = None,
        workdir: StrPath | None = None,
        task_status: trio.TaskStatus[TaskInfo] = trio.TASK_STATUS_IGNORED,
    ) -> RunEnded:
        """Run `text` as a new task of `session_id`; return the final event.

        Awaited directly, it returns when the run has ended. Started with
        ``info = await nursery.start(partial(executor.run, ...))`` it returns
        the run's `TaskInfo` as soon as `TaskStarted` is out (a cancel naming
        the hash works from then on) and the run goes on in the nursery; the
        errors below are then raised by ``nursery.start``. After that first
        event nothing but a cancel from outside escapes: every ending, a store
        that fails included, is told by the final `RunEnded`.

        Tools work in `workdir` (default: the configuration's), and so does any
        later resume of the task. Raises `PendingTaskExistsError` if the session
        has a pending task (resume or discard it first), `SessionBusyError` if it
        is running, `BadWorkdirError` if `workdir` is not a folder and
        `ModelNotConfiguredError` (before any task exists) if the model lacks its key.
        """
        check_session_id(session_id)
        folder = check_workdir(workdir) if workdir is not None else None
        with self._busy(session_id, owner, window_hash) as running:
            running.model = await self._model_for(session_id)
            # A secret stored by another process just before is hidden from the first piece on.
            self.config.redactor.refresh()
            # A stored secret typed into the message is saved as its name; the run itself
            # reads the message as typed.
            record = self._new_task(running, self.config.redactor.redact(text), folder)
            try:
                history = await self.store.create(record)
            except TaskExistsError as exc:
                raise PendingTaskExistsError(str(exc)) from None
            return await self._drive(
                running,
                record,
                history,
                emit,
                resumed=False,
                live=(Message.user(text),),
                task_status=task_status,
            )

    async def redo(
        self,
        session_id: str,
        text: str | None = None,
        *,
        owner: object,
        emit: Emit,
        window_hash: str | None = None,
        workdir: Path | None = None,
        task_status: trio.TaskStatus[TaskInfo] = trio.TASK_STATUS_IGNORED,
    ) -> RunEnded:
        """Run the session's last user message again, or `text` in its place (an edit).

        The last user message and every message after it (the replies and
        tool calls it led to) are replaced by the new run's task, in the one
        store transaction that writes it (`Store.replace_last_turn`): the
        run starts from the conversation before that message. Started and
        ended as `run` is, and refused as it is (`SessionBusyError` while a
        run of the session goes on, `PendingTaskExistsError` while it has a
        pending task: nothing is dropped then), and with
        `NothingToReplaceError` when the session has no user message.
        """
        check_session_id(session_id)
        folder = check_workdir(workdir) if workdir is not None else None
        with self._busy(session_id, owner, window_hash) as running:
            running.model = await self._model_for(session_id)
            self.config.redactor.refresh()
            typed = self.config.redactor.redact(text) if text is not None else None
            made: list[TaskRecord] = []

            def make(last: str) -> TaskRecord:
                made.append(self._new_task(running, typed if typed is not None else last, folder))
                return made[-1]

            try:
                _, history = await self.store.replace_last_turn(session_id, make)
            except TaskExistsError as exc:
                raise PendingTaskExistsError(str(exc)) from None
            except NoUserMessageError as exc:
                raise NothingToReplaceError(str(exc)) from None
            live = Message.user(text if text is not None else made[-1].input)
            return await self._drive(
                running,
                made[-1],
                history,
                emit,
                resumed=False,
                live=(live,),
                task_status=task_status,
            )

    async def resume(
        self,
        session_id: str,
        *,
        owner: object,
        emit: Emit,
        answer: str | None = None,
        question_id: str | None = None,
        window_hash: str | None = None,
        workdir: StrPath | None = None,
        task_status: trio.TaskStatus[TaskInfo] = trio.TASK_STATUS_IGNORED,
    ) -> RunEnded:
        """Resume the pending task of `session_id`, optionally answering its saved question.

        With `question_id`, `answer` is for that question only: if the task
        does not wait for it now, `LateAnswerError` says why and nothing changes.

        Started and ended as `run` is. Committed tool calls are not run again. The task is re-bound to
        `window_hash`, so its questions reach the window that resumed it. It
        works in the folder it recorded; a task that recorded none is given
        `workdir` (when set), and keeps it from then on. A model that lacks its
        key is refused (`ModelNotConfiguredError`) before the task is touched.
        """
        check_session_id(session_id)
        folder = check_workdir(workdir) if workdir is not None else None
        with self._busy(session_id, owner, window_hash) as running:
            effects: list[AnswerEffects] = []
            answered: list[QuestionTrace] = []

            def change(record: TaskRecord) -> TaskRecord:
                # Runs inside the store's transaction: a bad answer raises and writes nothing.
                self._check_not_running_elsewhere(record)
                # Left running while nobody runs it (that was checked), its run died; or it
                # was stopped where nobody could see its calls: the ledger says so.
                record = with_unseen_entries(record, records_start)
                effect = AnswerEffects()
                if answer is not None:
                    asked = record.question
                    record, effect = apply_answer(record, answer, question_id)
                    noted = trace_of(record.questions, asked.id) if asked is not None else None
                    answered[:] = [noted] if noted is not None else []
                effects.append(effect)
                return record.evolve(
                    status=TaskStatus.RUNNING,
                    cause=None,
                    error=None,
                    window_hash=window_hash,
                    task_hash=running.info.task_hash,
                    runs=record.runs + 1,
                    runner=self._token,
                    workdir=record.workdir
                    if record.workdir is not None or folder is None
                    else str(folder),
                )

            def pick(chosen: str | None) -> None:
                # In the claim's transaction, before the task is read: a model that cannot
                # be asked now refuses the resume with nothing written.
                running.model = self._ready_model(session_id, chosen)

            # The claim commits unsynced (no fsync, no WAL flush): the first synced write
            # after it (this run's next commit, a tool's recorded start, its stop) makes it
            # durable too, and nothing the run does is seen outside before one: a tool with
            # an effect runs only once its start is committed synced (`AgentRun.begin_effect`
            # awaits `Store.save_fields`). A claim lost in a power cut (or a PostgreSQL
            # crash) leaves the task as it was, paused; a fleet member whose claim was lost
            # is refused at its next write if another runner's token is in the row.
            loaded = await self.store.update(session_id, change, synced=False, model=pick)
            if loaded is None:
                raise NoPendingTaskError(f"session {session_id} has no pending task")
            record, history = loaded
            for trace in answered:
                # A live answer to it from now on is told it was answered here.
                context = RequestContext(session_id, window_hash, running.info.task_hash)
                self.registry.remember(trace, context)
            effect = effects[-1]
            if effect.allow is not None:
                self._allow.setdefault(session_id, set()).add(effect.allow)
            return await self._drive(
                running,
                record,
                history,
                emit,
                resumed=True,
                answered=effect,
                task_status=task_status,
            )

    async def discard(self, session_id: str) -> bool:
        """Throw a session's pending task away (a user-cancel); True if there was one.

        A running task of the session is cancelled with `Cause.USER_CANCEL`. A
        task another live agentrt process is running is refused
        (`SessionBusyError`), checked in the same store transaction as the
        delete. A record too damaged to read can still be discarded.
        """
        check_session_id(session_id)
        running = self._sessions.get(session_id)
        if running is not None:
            running.discarded = True
            running.scope.cancel(Cause.USER_CANCEL)
            return await self.store.delete(session_id)

        def check(status: str, runner: str | None) -> None:
            self._check_runner(session_id, status, runner)

        try:
            record = await self.store.load(session_id)
            history = await self.store.load_history(session_id) if record is not None else ()
        except StoreError:
            record = None  # too damaged to read: thrown away without a word to the model
        if record is None:
            return await self.store.delete(session_id, check)
        # The session keeps what the task did, and a word of how it ended, for its next message.
        told = _thrown_away_record(record, StopKind.USER_CANCEL, time.time())
        await self.store.finish(session_id, [*history, *told], record.window_hash, check=check)
        return True

    async def forget(self, session_id: str) -> None:
        """Delete a finished session: its conversation and every message of it.

        Raises `SessionBusyError` while a run of the session goes on,
        `PendingTaskExistsError` (deleting nothing) while it has a pending task
        (resume or discard that first), and `UnknownSessionError` when there
        is no such session.
        """
        check_session_id(session_id)
        if session_id in self._sessions:
            raise SessionBusyError(f"session {session_id} is running; stop it first")
        try:
            found = await self.store.forget(session_id)
        except TaskExistsError as exc:
            raise PendingTaskExistsError(str(exc)) from None
        if not found:
            raise UnknownSessionError(f"no session {session_id}")
        self._allow.pop(session_id, None)

    async def undo(
        self,
        session_id: str,
        *,
        turn: int | None = None,
        force: bool = False,
        task: str | None = None,
        dry_run: bool = False,
    ) -> UndoResult:
        """Put back what the session's last run changed in files (`agentrt.agent.checkpoint`).

        With `turn` (the index among the session's messages of one of its user
        messages, as `turns` gives them), every change of the runs after that
        turn is put back instead, and the model no longer sees what was said
        after it. A file changed since is a conflict: nothing is touched unless
        `force`, then its newer content is kept beside it. What was done is
        told to the model in a note, the last entry of the conversation.
        Refused, as `forget`, while the session runs or has a pending task.

        With `task`, only that task's changes are put back: a run stopped to be
        undone (Ctrl+C, then "discard and undo"), whose end is waited for when
        it is still winding down. With `dry_run`, nothing is touched, whatever
        runs: the result says what would be put back.
        """
        check_session_id(session_id)
        running = self._sessions.get(session_id)
        checkpoints = self.config.checkpoints
        if dry_run:
            if checkpoints is None or task is None:
                return UndoResult((), ())
            calls = checkpoints.of_task(session_id, task)
            return await trio.to_thread.run_sync(
                functools.partial(checkpoints.undo, session_id, calls, dry_run=True)
            )
        if running is not None and running.info.task_hash == task:
            # Stopped to be undone: its final event may come just before its session is free.
            with trio.move_on_after(_CLEANUP_SECONDS):
                await running.over.wait()
            running = self._sessions.get(session_id)
        if running is not None:
            raise SessionBusyError(f"session {session_id} is running; stop it first")
        if await self.store.lookup(session_id) is not None:
            raise PendingTaskExistsError(
                f"session {session_id} has a pending task; resume it or discard it first"
            )
        if await self.store.session(session_id) is None:
            raise UnknownSessionError(f"no session {session_id}")
        history = await self.store.load_history(session_id)
        rewinds: int | None = None
        if task is not None:
            calls = checkpoints.of_task(session_id, task) if checkpoints else []
        elif turn is None:
            calls = checkpoints.last_run(session_id) if checkpoints else []
        else:
            starts = _turn_starts(history)
            if turn not in starts:
                raise NoSuchTurnError(
                    f"session {session_id} has no turn at message {turn}; its turns begin at "
                    f"messages {', '.join(map(str, starts)) or '(none)'}"
                )
            rewinds = next((i for i in starts if i > turn), len(history))
            calls = checkpoints.from_turn(session_id, rewinds) if checkpoints else []
        if checkpoints is None:
            result = UndoResult((), ())
        else:
            result = await trio.to_thread.run_sync(
                functools.partial(checkpoints.undo, session_id, calls, force=force)
            )
        if result.conflicts and not result.done:
            return result
        if result.done or (rewinds is not None and rewinds < len(history)):
            note = Message(Role.NOTE, undo_note(result, rewinds is not None), rewinds=rewinds)
            owner = await self.store.owner(session_id)
            await self.store.finish(session_id, (*history, note), owner)
        return result

    async def turns(self, session_id: str) -> list[Turn]:
        """The session's turns, oldest first: where each begins, its words, and how many files
        a rewind to it would put back."""
        check_session_id(session_id)
        history = await self.store.load_history(session_id)
        checkpoints = self.config.checkpoints
        records = checkpoints.records(session_id) if checkpoints else []
        starts = _turn_starts(history)
        out = []
        for n, start in enumerate(starts):
            after = starts[n + 1] if n + 1 < len(starts) else len(history)
            later = [r for r in records if r.first >= after]
            files = checkpoints.count_files(later) if checkpoints else 0
            out.append(Turn(start, history[start].content, files))
        return out

    async def compact(self, session_id: str) -> int:
        """Compact a finished session's conversation now, whatever its size: a summary
        (`agentrt.agent.compaction`), written by the session's own model, stands for the
        older messages the model sees in what it is given from then on; the store keeps
        every message. Returns how many messages the summary stands for (0: too few to
        summarise).

        The session is busy while its summary is written: a run of it is refused
        meanwhile. Raises `SessionBusyError` while a run of the session goes on,
        `PendingTaskExistsError` while it has a pending task (a resume compacts as it
        needs), `UnknownSessionError` when there is no such session and
        `ModelNotConfiguredError` when its model cannot be asked now.
        """
        check_session_id(session_id)
        with self._busy(session_id, object(), None) as running:
            if await self.store.session(session_id) is None:
                raise UnknownSessionError(f"no session {session_id}")

            def no_task(status: str, runner: str | None) -> None:
                raise PendingTaskExistsError(
                    f"session {session_id} has a pending task; resume or discard it first"
                )

            if await self.store.load(session_id) is not None:
                no_task("", None)
            model = await self._model_for(session_id)
            history = await self.store.load_history(session_id)
            with running.scope:
                entry = await compaction_of(
                    model, self.config.context, model_view(history), (), force=True
                )
            if entry is None or entry.compaction is None:
                return 0
            summarised = entry.compaction.summarised
            entry = attrs.evolve(entry, content=self.config.redactor.redact(entry.content))
            owner = await self.store.owner(session_id)
            try:
                # Refused in the same transaction if a task began meanwhile (in another
                # process): it is left alone.
                await self.store.finish(session_id, [*history, entry], owner, check=no_task)
            except TaskExistsError as exc:
                raise PendingTaskExistsError(str(exc)) from None
            return summarised

    def _check_not_running_elsewhere(self, record: TaskRecord) -> None:
        """Refuse a task that another live agentrt process is running right now."""
        self._check_runner(record.session_id, record.status.value, record.runner)

    def _check_held(self, status: str, runner: str | None) -> None:
        """Refuse a run's own delete of a task that another runner took over meanwhile."""
        if runner is not None and runner != self._token:
            raise TaskTakenError(
                "the pending task was taken over by another runner; it is left to that one"
            )

    def _check_runner(self, session_id: str, status: str, runner: str | None) -> None:
        if (
            status == TaskStatus.RUNNING.value
            and runner is not None
            and runner != self._token
            and token_alive(runner)
        ):
            raise SessionBusyError(
                f"session {session_id} is running in another agentrt process "
                f"(pid {token_pid(runner)}); pause or stop it there first"
            )

    # -- cancelling -------------------------------------------------------

    def cancel(self, task_hash: str, cause: Cause, *, owner: object | None = None) -> TaskInfo:
        """Cancel a running task with `cause`; with `owner`, only that owner's task.

        Raises `UnknownTaskError` for a hash that is unknown or finished and
        `NotOwnerError` for another owner's task.
        """
        running = self._tasks.get(task_hash)
        if running is None:
            raise UnknownTaskError(f"no running task {task_hash!r}: unknown or already finished")
        if owner is not None and running.info.owner is not owner:
            raise NotOwnerError(f"task {task_hash!r} was not started by this client")
        running.scope.cancel(cause)
        return running.info

    def cancel_from(self, task_hash: str, cause: Cause, kind: str | None) -> TaskInfo:
        """Cancel a running task for a front-end of another daemon of the fleet.

        `kind` names the front-end that asked (`owner_kind`); as on one daemon,
        it may stop only the tasks a front-end of its kind started here (None:
        any, as the owner's own command may). Raises as `cancel` does.
        """
        running = self._tasks.get(task_hash)
        if running is None:
            raise UnknownTaskError(f"no running task {task_hash!r}: unknown or already finished")
        if kind is not None and owner_kind(running.info.owner) != kind:
            raise NotOwnerError(f"task {task_hash!r} was not started by this client")
        running.scope.cancel(cause)
        return running.info

    def cancel_owner(self, owner: object, cause: Cause) -> int:
        """Cancel every task `owner` started (a closed connection); return how many."""
        hit = [r for r in self._tasks.values() if r.info.owner is owner]
        for running in hit:
            running.scope.cancel(cause)
        return len(hit)

    def cancel_all(self, cause: Cause) -> int:
        """Cancel every running task (shutdown); return how many."""
        for running in self._tasks.values():
            running.scope.cancel(cause)
        return len(self._tasks)

    def running(self, owner: object | None = None) -> list[TaskInfo]:
        """The running tasks, all or one owner's."""
        return [r.info for r in self._tasks.values() if owner is None or r.info.owner is owner]

    def held(self) -> list[str]:
        """The sessions whose task a run of this executor holds: those running, and those
        stopped whose write that says so is still on its way to the store (their final
        event goes out first: see `_conclude`). Until that write is made, the task's row
        still says it runs here, and rightly: nobody else may take it meanwhile."""
        return [*self._sessions, *(s for s in self._stopping if s not in self._sessions)]

    def is_running(self, session_id: str) -> bool:
        """Whether a run of `session_id` is going on."""
        return session_id in self._sessions

    def statistics(self) -> ExecutorStatistics:
        """Counts of running tasks and session allowances."""
        return ExecutorStatistics(len(self._tasks), len(self._allow))

    # -- internals --------------------------------------------------------

    def _register(self, session_id: str, owner: object, window_hash: str | None) -> _Running:
        if session_id in self._sessions:
            raise SessionBusyError(f"session {session_id} is running; cancel or pause it first")
        task_hash = new_task_hash()
        while task_hash in self._tasks:
            task_hash = new_task_hash()
        running = _Running(TaskInfo(task_hash, session_id, owner, window_hash))
        self._tasks[task_hash] = running
        self._sessions[session_id] = running
        return running

    @contextlib.contextmanager
    def _busy(self, session_id: str, owner: object, window_hash: str | None) -> Iterator[_Running]:
        """The session busy with a new task while the block runs (`SessionBusyError` if it is).

        Entered before anything is awaited, so the session is busy from the call on.
        """
        running = self._register(session_id, owner, window_hash)
        try:
            yield running
        finally:
            self._unregister(running)

    def _new_task(self, running: _Running, said: str, folder: Path | None) -> TaskRecord:
        """The record of the task `running` starts with the user message `said`, in `folder`."""
        info = running.info
        return TaskRecord(
            info.session_id,
            said,
            (Message.user(said),),
            window_hash=info.window_hash,
            task_hash=info.task_hash,
            runner=self._token,
            workdir=str(folder) if folder is not None else None,
        )

    def _unregister(self, running: _Running) -> None:
        self._tasks.pop(running.info.task_hash, None)
        if self._sessions.get(running.info.session_id) is running:
            del self._sessions[running.info.session_id]
        running.over.set()

    async def _drive(
        self,
        running: _Running,
        record: TaskRecord,
        history: Sequence[Message],
        emit: Emit,
        *,
        resumed: bool,
        answered: AnswerEffects | None = None,
        live: tuple[Message, ...] = (),
        task_status: trio.TaskStatus[TaskInfo],
    ) -> RunEnded:
        info = running.info
        config = self.config
        config.redactor.refresh()  # every run's start: see `Redactor`
        if record.workdir is not None:
            config = attrs.evolve(config, workdir=Path(record.workdir))
        assert running.model is not None  # given when the run was registered
        effects = answered or AnswerEffects()
        agent = AgentRun(
            model=running.model,
            registry=self.registry,
            config=config,
            emit=emit,
            task_hash=info.task_hash,
            snapshot=record,
            store=self.store,
            history=history,
            session_allow=self._allow.setdefault(info.session_id, set()),
            preapproved=set(effects.approved),
            prefilled=dict(effects.prefilled),
            resumed=resumed,
            live=list(live),
            stop=running.scope.cancel,
        )
        with bind_context(RequestContext(info.session_id, info.window_hash, info.task_hash)):
            # create() / update() persisted the record as RUNNING already. The first event
            # goes out whatever happens next: a cancel that arrived while the record was
            # being written still finds a run that said it started.
            await self._emit_first(emit, _task_started(info, record, resumed))
            task_status.started(info)
            text: str | None = None
            question: SavedQuestion | None = None
            try:
                with running.scope, span("invoke_agent agentrt", _run_attributes(info, agent)):
                    text, question = await agent.drive()
            except BaseException as exc:
                ending, again = _classify_failure(running, exc, await stop_cause(exc))
                if ending is None:
                    raise  # KeyboardInterrupt, SystemExit: not ours to handle
                if ending.outcome is Outcome.FAILED:
                    log.warning(
                        "run %s of %s failed: %s", info.task_hash, info.session_id, ending.error
                    )
                ended = await self._conclude(emit, agent, history, ending)
                if again:
                    raise  # an outer cancel is under way: do not swallow it
                return ended
            return await self._conclude(
                emit, agent, history, _classify_return(running, text, question)
            )

    async def _conclude(
        self, emit: Emit, agent: AgentRun, history: Sequence[Message], ending: _Ending
    ) -> RunEnded:
        """Do what `SETTLE` says for the run's ending, then emit the final event.

        A stop that keeps the task waits for nothing: every commit saved the
        record already, so only its status and cause change, queued now and
        awaited after the final event. Every other ending is written shielded
        from outside cancels: a cancel with a cause is caught by the run's own
        scope, and if the process starts shutting down right then, the write
        must still reach the store, or the task would be left marked as
        running. That write is bounded: past the limit the task is left as it
        stands (kept, since its record exists); a store that fails leaves it so
        too. The final event is not shielded: a caller that is itself being
        cancelled (a connection going away) is not waited on to hear it.
        """
        label: Queued[bool] | None = None
        settle = SETTLE[(ending.outcome, ending.cause)]
        if settle is Settle.KEEP_INTERRUPTED:
            try:
                ended, label = self._keep_interrupted(agent, ending)
            except StoreError as exc:
                ended = self._unsaved(agent, f"the outcome of the run could not be saved: {exc}")
                log.error("run %s: %s", agent.task_hash, ended.error)
        else:
            ended = self._unsaved(
                agent, f"the outcome of the run could not be saved within {_CLEANUP_SECONDS:g}s"
            )
            with _bounded_shield(_CLEANUP_SECONDS) as timeout:
                try:
                    ended = await self._settle(settle, agent, history, ending)
                except StoreError as exc:
                    ended = self._unsaved(
                        agent, f"the outcome of the run could not be saved: {exc}"
                    )
                    log.error("run %s: %s", agent.task_hash, ended.error)
            if timeout.cancelled_caught:
                log.error("run %s: %s", agent.task_hash, ended.error)
        if label is None:
            await self._emit_final(emit, ended)
        else:
            # Held (`held`) until the write is made: the task's row says it runs till then.
            session_id = agent.snapshot.session_id
            self._stopping[session_id] = self._stopping.get(session_id, 0) + 1
            try:
                await self._emit_final(emit, ended)
                # Let whoever reads the final event (a connection writing it to its peer) go
                # first: the store's thread, woken by the wait below, would compete with it.
                await trio.lowlevel.cancel_shielded_checkpoint()
                # The kept task's new status, queued before the final event went out: a call
                # made after that event (a resume, a listing) is queued after it and sees it.
                with _bounded_shield(_CLEANUP_SECONDS):
                    try:
                        await label.wait()
                    except StoreError as exc:
                        log.error("run %s: its status could not be saved: %s", agent.task_hash, exc)
            finally:
                left = self._stopping.pop(session_id) - 1
                if left:
                    self._stopping[session_id] = left
        # The outcome is safe: now let a cancel from outside through.
        await trio.lowlevel.checkpoint_if_cancelled()
        return ended

    @staticmethod
    def _unsaved(agent: AgentRun, error: str) -> RunEnded:
        """The ending of a run whose outcome the store did not take: its record stays as it was."""
        return RunEnded(
            agent.task_hash,
            agent.snapshot.session_id,
            Outcome.FAILED,
            error=error,
            pending_kept=True,
        )

    async def _settle(
        self, settle: Settle, agent: AgentRun, history: Sequence[Message], ending: _Ending
    ) -> RunEnded:
        """Tell the store `settle` (any but `Settle.KEEP_INTERRUPTED`); the final event."""
        task_hash, session_id = agent.task_hash, agent.snapshot.session_id
        if settle is Settle.DELETE:
            return await self._delete(agent, history, ending)
        if settle is Settle.KEEP_FAILED:
            return await self._keep_failed(agent, ending)
        if settle is Settle.KEEP_QUESTION:
            # The round saved the question with the task already: nothing to write.
            await trio.lowlevel.checkpoint()
            return RunEnded(
                task_hash,
                session_id,
                ending.outcome,
                question=ending.question,
                pending_kept=True,
                question_id=ending.question_id,
            )
        # The saved form: what the store adds now is redacted as every commit was.
        await self.store.finish(
            session_id,
            Joined(history, agent.snapshot.transcript),  # read from the end: no copy
            agent.snapshot.window_hash,
            runner=self._token,
        )
        return RunEnded(task_hash, session_id, ending.outcome, text=ending.text)

    def _keep_interrupted(self, agent: AgentRun, ending: _Ending) -> tuple[RunEnded, Queued[bool]]:
        """A stop that keeps the task: (its final event, the status write queued for it)."""
        assert ending.cause is not None  # a stop has a cause
        record = agent.snapshot
        # The ledger's entry of this stop, then the status: one call, queued now, the entry
        # made in the store's thread (the final event does not wait for it).
        label = self.store.stop_nowait(
            agent.stopped_later(StopKind.of(ending.cause), time.time()),
            TaskStatus.INTERRUPTED,
            cause=ending.cause,
            lost_words=agent.uncommitted_words,
            runner=self._token,
        )
        # A call whose full arguments were past what a task keeps cannot run on resume:
        # the stop says which, so nobody expects it to.
        ended = RunEnded(
            agent.task_hash,
            record.session_id,
            ending.outcome,
            cause=ending.cause,
            error=reissue_note(record),
            pending_kept=True,
        )
        return ended, label

    async def _delete(
        self, agent: AgentRun, history: Sequence[Message], ending: _Ending
    ) -> RunEnded:
        """A user-cancel: the task is deleted (unless a discard of it did that already)."""
        record = agent.snapshot
        stopped = agent.stopped(StopKind.USER_CANCEL, time.time())
        # The task goes; the session keeps what it did, with a result for each call it left
        # without one and the note of how it ended, for the model of its next message.
        await self.store.finish(
            record.session_id,
            Joined(history, [*record.transcript, *thrown_away(stopped, entries_of(stopped))]),
            record.window_hash,
            runner=self._token,
        )
        return RunEnded(
            agent.task_hash,
            record.session_id,
            ending.outcome,
            cause=ending.cause,
            pending_kept=False,
        )

    async def _keep_failed(self, agent: AgentRun, ending: _Ending) -> RunEnded:
        record = agent.snapshot
        error = ending.error
        assert error is not None  # a failure says what failed
        kept = True
        try:
            self.store.save_fields_nowait(agent.stopped(StopKind.FAILURE, time.time(), error=error))
            await self.store.mark(
                record.session_id,
                TaskStatus.FAILED,
                error=error,
                lost_words=agent.uncommitted_words,
                runner=self._token,
            )
        except StoreError as exc:
            log.error("could not keep the pending task of %s: %s", record.session_id, exc)
            kept = False
            error = f"{error}; and the pending task could not be saved: {exc}"
        return RunEnded(
            agent.task_hash, record.session_id, ending.outcome, error=error, pending_kept=kept
        )

    async def _emit_first(self, emit: Emit, started: TaskStarted) -> None:
        """Emit `TaskStarted`, shielded (and bounded) so that no cancel can skip it."""
        with _bounded_shield(_CLEANUP_SECONDS):
            try:
                await emit(started)
            except Exception as exc:  # the receiver went away; the run still settles
                log.info("first event of %s not delivered: %s", started.task_hash, exc)

    async def _emit_final(self, emit: Emit, ended: RunEnded) -> None:
        # The task is over before anyone hears so: a client that resumes the session the
        # moment it sees the final event must not find it still running.
        running = self._tasks.get(ended.task_hash)
        if running is not None:
            self._unregister(running)
        try:
            await emit(ended)
        except Exception as exc:  # the receiver went away; the outcome is already persisted
            log.info("final event of %s not delivered: %s", ended.task_hash, exc)


def owner_kind(owner: object) -> str | None:
    """The kind of front-end an owner of runs is (its ``kind``: ``"http"``...), or None."""
    kind = getattr(owner, "kind", None)
    return kind if isinstance(kind, str) else None


def _bounded_shield(seconds: float) -> trio.CancelScope:
    """A scope shielded from outside cancels that gives up by itself after `seconds`.

    One scope where a shield and a `move_on_after` would take two.
    """
    return trio.CancelScope(shield=True, deadline=trio.current_time() + seconds)


def _task_started(info: TaskInfo, record: TaskRecord, resumed: bool) -> TaskStarted:
    """The first event; on a resume it says what the stop cost."""
    if not resumed:
        return TaskStarted(info.task_hash, info.session_id)
    kept, rerun = resume_counts(record, records_start)
    return TaskStarted(info.task_hash, info.session_id, True, kept, rerun, record.lost_words)


def _thrown_away_record(record: TaskRecord, stop: StopKind, at: float) -> list[Message]:
    """What the session keeps of a kept task thrown away: its transcript, results, a note.

    The stops it had are told as they were recorded; the throwing away is one
    more entry, with the calls' states only when no earlier entry gave them.
    """
    entries = entries_of(record)
    calls = () if entries else round_ledger("", record.transcript, record.attempts)
    entries.append(Interruption(stop, at, calls))
    return [*record.transcript, *thrown_away(record, entries)]


def _check_ending(self: _Ending, _: attrs.Attribute[Cause | None], cause: Cause | None) -> None:
    if (self.outcome, cause) not in SETTLE:
        raise ValueError(f"no run ends {self.outcome.value} with cause {cause}")


@record
class _Ending:
    """How a run ended, as classified before the store is told (see `Executor._conclude`).

    Its (outcome, cause) is one of `SETTLE`'s: a cancelled run has a cause, no other has.
    """

    outcome: Outcome
    cause: Cause | None = attrs.field(default=None, validator=_check_ending)
    error: str | None = None
    text: str | None = None
    #: The prompt of the question a parked run saved, and its id.
    question: str | None = None
    question_id: str | None = None


def _ending_cause(running: _Running, carried: Cause | None = None) -> Cause:
    """Why a cancelled run stopped: the one place the cause of an ending is said.

    A discard of the run's task makes it a user-cancel, whatever stopped the run
    first: the task is gone. Otherwise the first cause the run's scope was
    given; else the one the cancel from outside carried (`carried`, said by
    `stop_cause`); else a shutdown (a nursery above the run was cancelled).
    """
    if running.discarded:
        return Cause.USER_CANCEL
    return running.scope.cause or carried or Cause.SHUTDOWN


def _classify_return(
    running: _Running, text: str | None, question: SavedQuestion | None
) -> _Ending:
    """The ending of a run whose agent returned (or whose own scope caught a cancel)."""
    if running.scope.cancelled_caught:
        return _Ending(Outcome.CANCELLED, cause=_ending_cause(running))
    if question is not None:
        return _Ending(Outcome.AWAITING_ANSWER, question=question.prompt, question_id=question.id)
    return _Ending(Outcome.FINISHED, text=text)


def _classify_failure(
    running: _Running, exc: BaseException, carried: Cause | None
) -> tuple[_Ending | None, bool]:
    """The ending of a run whose agent raised `exc`, and whether `exc` must propagate after it.

    None for an exception that is not the run's to settle (KeyboardInterrupt,
    SystemExit). A cancel from outside the run (the process shutting down, or
    the cause `carried`) keeps the task and propagates. Any error keeps it too:
    as the failure it is, or as the cancel the run's own scope was given, when
    the error came of that cancel.
    """
    cancelled, rest = _split(exc, trio.Cancelled)
    if rest is None:
        return _Ending(Outcome.CANCELLED, cause=_ending_cause(running, carried)), True
    errors, _ = _split(exc, Exception)
    if errors is None:
        return None, True
    if running.scope.cause is not None:
        return _Ending(Outcome.CANCELLED, cause=_ending_cause(running, carried)), False
    return _Ending(Outcome.FAILED, error=_describe(_first_leaf(errors))), cancelled is not None


def _split(
    exc: BaseException, kind: type[BaseException]
) -> tuple[BaseException | None, BaseException | None]:
    """`exc` split into what is of `kind` and the rest, groups or not (`BaseExceptionGroup.split`)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(kind)
    return (exc, None) if isinstance(exc, kind) else (None, exc)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """A one-line description of what ended a run, for the user."""
    if isinstance(exc, ModelError):
        return f"model error: {exc}"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, ExecutorError) else text


def _turn_starts(history: Sequence[Message]) -> list[int]:
    """Where each turn the model sees begins: its user messages' indices."""
    return [i for i in seen_indices(history) if history[i].role is Role.USER]


def _run_attributes(info: TaskInfo, agent: AgentRun) -> dict[str, Attribute | None]:
    """The attributes of a run's span (see `agentrt.core.tracing`)."""
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "agentrt",
        "gen_ai.conversation.id": info.session_id,
        "gen_ai.request.model": agent.model.name,
        "agentrt.session.id": info.session_id,
        "agentrt.task.hash": info.task_hash,
        "agentrt.resumed": agent.resumed,
    }

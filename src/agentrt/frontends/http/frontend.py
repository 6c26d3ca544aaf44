"""The web front-end's state: its runs, its `chat-` listener, and the live event feed.

One `WebFrontEnd` serves one HTTP server. It owns the runs started over HTTP
(they run in the server's nursery, since `Executor.run` blocks until a run
ends), holds the server's single ``"chat-"`` listener, and fans events and
claimed questions out to every subscriber of `/v1/events`.

Every event of the feed gets an id, one more than the last; the first id is
the time the front-end started, in microseconds, so ids keep growing across
restarts of the daemon. The last `EVENT_RING` events are kept, so a client
that reconnects with ``Last-Event-ID`` is sent what it missed; one whose id is
no longer kept (or was never given here) is told to reload instead.
"""

from __future__ import annotations

import collections
import json
import logging
import re
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import attrs
import trio

from ...agent.preview import resume_preview
from ...core.cause import Cause
from ...core.context import origin_of
from ...core.desk import Desk
from ...core.executor import _MAX_SESSION_ID as MAX_SESSION_ID
from ...core.executor import BadSessionIdError
from ...core.executor import NoPendingTaskError
from ...core.executor import NotOwnerError
from ...core.executor import SessionBusyError
from ...core.executor import TaskInfo
from ...core.executor import UnknownSessionError
from ...core.executor import UnknownTaskError
from ...core.executor import check_session_id
from ...core.pending import Answer
from ...core.pending import Entry
from ...core.pending import EntryState
from ...core.pending import Listener
from ...core.policy import Actor
from ...core.runtime import Runtime
from ...present.shapes import event_to_json
from ...present.shapes import preview_json
from ...present.shapes import question_to_json
from ...present.shapes import stored_message_to_json
from ...present.shapes import task_to_json
from ...present.shapes import unreadable_to_json
from ...present.shapes import usage_json
from ...store import SessionInfo
from ...store import UnreadableTask
from ...vocab.events import Event
from ...vocab.events import RunEnded
from ...vocab.reprs import mutable
from ...vocab.reprs import record
from ...vocab.terms import ORIGINS
from ...vocab.terms import WEB
from .bodies import ApiError
from .bodies import UndoBody

log = logging.getLogger("agentrt.http")

#: Events a subscriber may fall behind by before it is dropped (its page reconnects).
SUBSCRIBER_BUFFER = 1024
#: Recent events kept for clients that reconnect with ``Last-Event-ID``.
EVENT_RING = 4096
#: The origin of sessions created over HTTP whose id names no origin.
DEFAULT_ORIGIN = WEB
#: The name the web listener shows in "waiting on".
LISTENER_NAME = "web"


#: Who HTTP requests act as, for the access policy.
HTTP_ACTOR = Actor.http()


#: A character of a session id in a path: visible ASCII except ``/`` (which ends the
#: segment) and ``%`` (which clients read as the start of an escape, and often do not escape).
_ID_CHARACTER = "[!-$&-.0-~]"


def _session_id_pattern() -> str:
    # An id with a known origin is used as it is; any other gets chat- put before it,
    # and either way the session id is at most MAX_SESSION_ID characters.
    prefixed = [
        f"{origin}{_ID_CHARACTER}{{0,{MAX_SESSION_ID - len(origin)}}}" for origin in ORIGINS
    ]
    bare = f"{_ID_CHARACTER}{{1,{MAX_SESSION_ID - len(DEFAULT_ORIGIN)}}}"
    return "^(?:" + "|".join([*prefixed, bare]) + ")$"


def _chat_session_id_pattern() -> str:
    # The sessions a run may start in: chat- ones, and ids of no known origin.
    others = "|".join(origin for origin in ORIGINS if origin != DEFAULT_ORIGIN)
    chat = f"{DEFAULT_ORIGIN}{_ID_CHARACTER}{{0,{MAX_SESSION_ID - len(DEFAULT_ORIGIN)}}}"
    bare = f"(?!{others}){_ID_CHARACTER}{{1,{MAX_SESSION_ID - len(DEFAULT_ORIGIN)}}}"
    return f"^(?:{chat}|{bare})$"


#: The session ids a path may carry, as the OpenAPI document declares them (ECMA-262
#: syntax, which Python's `re` reads alike).
SESSION_ID_PATTERN = _session_id_pattern()
#: ...and those a new run may start in (`WebFrontEnd.start_run` refuses the others).
CHAT_SESSION_ID_PATTERN = _chat_session_id_pattern()
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
#: The listing cursors `GET /v1/sessions` takes, as the OpenAPI document declares them:
#: the `next` of a page is the time of its last session, a colon and that session's id.
CURSOR_PATTERN = r"^[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?:[\s\S]*$"


def session_id_from_path(raw: str) -> str:
    """The session a path names: ids without a known origin are `chat-` sessions.

    Raises `BadSessionIdError` for an id outside `SESSION_ID_PATTERN`.
    """
    if _SESSION_ID.fullmatch(raw) is None:
        raise BadSessionIdError(
            f"a session id in a path is 1 to {MAX_SESSION_ID} visible ASCII characters other "
            f"than '/' and '%', and {MAX_SESSION_ID - len(DEFAULT_ORIGIN)} at most without an "
            f"origin prefix ({DEFAULT_ORIGIN!r} is put before it)"
        )
    session_id = raw if origin_of(raw) else DEFAULT_ORIGIN + raw
    return check_session_id(session_id)


@record
class StreamItem:
    """One event of the feed: its id, the session it is about (if any), its JSON text."""

    id: int
    session_id: str | None
    data: str


@mutable(eq=False)
class Subscription:
    """What a new subscriber of the feed gets: where it starts, what it missed, what comes.

    `start` is the id of the last event before the ones `channel` will carry;
    `replay` are the kept events after the client's ``Last-Event-ID``; `lost`
    is True when that id cannot be replayed from (too old, or never given by
    this front-end): the client must read the state afresh.
    """

    start: int
    replay: list[StreamItem]
    lost: bool
    channel: trio.MemoryReceiveChannel[StreamItem]


@mutable(eq=False)
class HttpOwner:
    """The owner of every run started over HTTP with one token."""

    name: str = "http"
    #: What a cancel from the HTTP API of another daemon of the fleet may stop (see
    #: `Executor.cancel_from`): runs started over HTTP.
    kind: str = "http"


@mutable(eq=False)
class WebFrontEnd:
    """Runs, questions and events of the HTTP API and the web page."""

    runtime: Runtime
    nursery: trio.Nursery
    listener: Listener
    owner: HttpOwner = attrs.field(factory=HttpOwner)
    #: Claims, forwards and answers the questions of `listener`.
    _desk: Desk[None] = attrs.field(init=False)
    _subscribers: dict[trio.MemorySendChannel[StreamItem], str | None] = attrs.field(
        factory=dict, init=False
    )
    #: The id before the first event this front-end gives.
    _base: int = attrs.field(factory=lambda: time.time_ns() // 1000, init=False)
    _last_id: int = attrs.field(init=False)
    #: The newest id that is no longer kept (`_base` while every event is).
    _dropped: int = attrs.field(init=False)
    _ring: collections.deque[StreamItem] = attrs.field(
        factory=lambda: collections.deque(maxlen=EVENT_RING), init=False
    )

    def __attrs_post_init__(self) -> None:
        self._last_id = self._dropped = self._base
        self._desk = Desk(self.listener, self._forward, self._question_closed)

    # -- runs ---------------------------------------------------------------

    async def start_run(self, session_id: str, text: str) -> str:
        """Start `text` as a new task of `session_id` in the server's nursery; return its hash.

        Returns once the run has emitted its first event, so a cancel naming
        the hash works at once. Errors before that (a pending task exists, the
        session is running) are raised here.
        """
        self._check_may_start(session_id)
        run = partial(self.runtime.executor.run, session_id, text)
        return await self._start(session_id, run)

    async def redo(self, session_id: str, text: str | None = None) -> str:
        """Run the session's last user message again (`text`: edited), its reply and tool
        calls replaced (`Executor.redo`); return the new run's hash."""
        self._check_may_start(session_id)
        await self._visible_session(session_id)
        redo = partial(self.runtime.executor.redo, session_id, text)
        return await self._start(session_id, redo)

    # -- models -------------------------------------------------------------

    def models(self) -> dict[str, Any]:
        """The configured models, each saying whether it can be used now, and the default."""
        entries = self.runtime.executor.models()
        return {
            "models": [
                {"name": e.name, "default": e.default, "usable": e.usable, "why": e.why}
                for e in entries
            ],
            "default": next(e.name for e in entries if e.default),
        }

    async def session_model(self, session_id: str) -> dict[str, Any]:
        """The model `session_id` runs with: its chosen one, else the default."""
        if not await self._may_act(session_id):
            raise UnknownSessionError(f"no session {session_id}")
        model = await self.runtime.executor.session_model(session_id)
        return {"session_id": session_id, "model": model}

    async def choose_model(self, session_id: str, model: str) -> dict[str, Any]:
        """Switch `session_id` to `model` from its next run on (`Executor.choose_model`)."""
        self._check_may_start(session_id)
        if not await self._may_act(session_id):
            raise UnknownSessionError(f"no session {session_id}")
        await self.runtime.executor.choose_model(session_id, model)
        return {"session_id": session_id, "model": model}

    def _check_may_start(self, session_id: str) -> None:
        if not self.runtime.policy.may_start(HTTP_ACTOR, session_id, None):
            raise ApiError(
                400,
                "bad_session_id",
                f"the HTTP API starts runs in {DEFAULT_ORIGIN!r} sessions only, not "
                f"{session_id!r}; name the session without a prefix or with {DEFAULT_ORIGIN!r}",
            )

    async def resume(
        self, session_id: str, answer: str | None, question_id: str | None = None
    ) -> str:
        """Resume the pending task of `session_id` (answering its saved question); return its hash.

        With `question_id`, the answer is for that question only (`Executor.resume`).
        """
        if not await self._may_act(session_id):
            raise NoPendingTaskError(f"session {session_id} has no pending task")
        resume = partial(
            self.runtime.executor.resume, session_id, answer=answer, question_id=question_id
        )
        return await self._start(session_id, resume)

    async def _start(self, session_id: str, start: Callable[..., Awaitable[RunEnded]]) -> str:
        """Start a run in the server's nursery: from its first event on it belongs there."""

        async def emit(event: Event) -> None:
            self._publish_event(session_id, event)

        info: TaskInfo = await self.nursery.start(partial(start, owner=self.owner, emit=emit))
        return info.task_hash

    def cancel(self, task_hash: str, cause: Cause) -> TaskInfo:
        """Stop a task started over HTTP for `cause`: a pause keeps its pending task."""
        try:
            return self.runtime.executor.cancel(task_hash, cause, owner=self.owner)
        except NotOwnerError:
            # Answered as an unknown hash, so no one can probe for other front-ends' tasks.
            raise UnknownTaskError(
                f"no running task {task_hash!r}: unknown or already finished"
            ) from None

    async def cancel_anywhere(self, task_hash: str, cause: Cause) -> TaskInfo:
        """`cancel`, or in a fleet, the cancel of a task started over HTTP on another daemon."""
        try:
            return self.cancel(task_hash, cause)
        except UnknownTaskError:
            fleet = self.runtime.fleet
            if fleet is None:
                raise
        return await fleet.cancel(task_hash, cause, kind=self.owner.kind)

    async def discard(self, session_id: str) -> bool:
        """Drop a session's pending task (a user-cancel); True if there was one.

        A run of the session started elsewhere (a terminal window, a bot) is
        not the web's to stop: `SessionBusyError` says so.
        """
        if not await self._may_act(session_id):
            return False
        executor = self.runtime.executor
        for info in executor.running():
            if info.session_id == session_id and info.owner is not self.owner:
                raise SessionBusyError(
                    f"session {session_id} is running in another front-end; stop it there"
                )
        running = executor.is_running(session_id)
        found = await executor.discard(session_id)
        return found or running

    # -- what there is -----------------------------------------------------

    async def task(self, session_id: str) -> dict[str, Any] | None:
        """The pending task of `session_id` as JSON, with what resuming it will do; or None."""
        record = await self.runtime.store.load(session_id)
        if record is None or not self._policy_allows(record.session_id, record.window_hash):
            return None
        obj = task_to_json(record, running=self.runtime.executor.is_running(session_id))
        obj["waiting_on"] = self._waiting_on(session_id, obj)
        obj["preview"] = preview_json(resume_preview(record))
        return obj

    async def sessions(
        self, *, limit: int, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of the sessions HTTP may act on, most recently active first, and the cursor
        of the next page (None after the last).

        Finished sessions are listed with their title and message count; a
        session with a pending task also with the task's fields, as before. A
        run that has stored nothing yet is listed on the first page.
        """
        executor = self.runtime.executor
        store = self.runtime.store
        running = {info.session_id: info for info in executor.running()}
        page = await store.sessions("", limit=limit, cursor=cursor)
        out: list[dict[str, Any]] = []
        for info in page.items:
            if self._policy_allows(info.session_id, info.window_hash):
                out.append(self._listed(info, running.get(info.session_id)))
        if cursor is None:
            listed = {obj["session_id"] for obj in out}
            for session_id, run in running.items():
                if (
                    session_id not in listed
                    and self._policy_allows(session_id, run.window_hash)
                    and await store.session(session_id) is None
                ):
                    obj = {"session_id": session_id, "status": "running", "running": True}
                    out.append(self._session_json(session_id, run, obj))
        return out, page.next

    def _listed(self, info: SessionInfo, run: TaskInfo | None) -> dict[str, Any]:
        task = info.task
        if isinstance(task, UnreadableTask):
            # Listed, so that it can be seen and discarded; the rest stay usable.
            obj = unreadable_to_json(task, running=run is not None)
        elif task is not None:
            obj = task_to_json(task, running=run is not None)
        else:
            obj = {
                "session_id": info.session_id,
                "status": None,
                "running": run is not None,
                "cause": None,
                "question": None,
                "created_at": info.created_at,
                "updated_at": info.updated_at,
            }
        obj["title"] = info.title
        obj["messages"] = info.messages
        obj["model"] = info.model
        if obj.get("created_at") is None:
            obj["created_at"] = info.created_at
        if obj.get("updated_at") is None:
            obj["updated_at"] = info.updated_at
        return self._session_json(info.session_id, run, obj)

    async def _visible_session(self, session_id: str) -> SessionInfo:
        """The session, if HTTP may act on it; `UnknownSessionError` otherwise (the same
        answer for a session that does not exist and one HTTP may not see)."""
        info = await self.runtime.store.session(session_id)
        if info is None or not self._policy_allows(session_id, info.window_hash):
            raise UnknownSessionError(f"no session {session_id}")
        return info

    async def messages(self, session_id: str, *, after: int, limit: int) -> dict[str, Any]:
        """A page of a session's stored messages with `seq` above `after`, oldest first."""
        await self._visible_session(session_id)
        page = await self.runtime.store.messages(session_id, after=after, limit=limit)
        prices = self.runtime.executor.config.prices
        usage = [prices.priced(run) for run in await self.runtime.store.usage(session_id)]
        return {
            "messages": [stored_message_to_json(m) for m in page.items],
            "next": None if page.next is None else int(page.next),
            "usage": usage_json(usage),
        }

    async def forget(self, session_id: str) -> None:
        """Delete a finished session and its messages (see `Executor.forget` for refusals)."""
        await self._visible_session(session_id)
        await self.runtime.executor.forget(session_id)

    async def undo(self, session_id: str, body: UndoBody) -> dict[str, Any]:
        """Put back a run's files (see `Executor.undo` for what and for refusals), as JSON."""
        await self._visible_session(session_id)
        result = await self.runtime.executor.undo(session_id, turn=body.turn, force=body.force)
        return {
            "session_id": session_id,
            "done": result.done,
            "restored": list(result.restored),
            "conflicts": list(result.conflicts),
            "kept": dict(result.kept),
            "skipped": dict(result.skipped),
        }

    async def turns(self, session_id: str) -> list[dict[str, Any]]:
        """The session's turns the model sees, and how many files a rewind to each puts back."""
        await self._visible_session(session_id)
        turns = await self.runtime.executor.turns(session_id)
        return [{"seq": t.index, "text": t.text, "files": t.files} for t in turns]

    def _policy_allows(self, session_id: str, owner: str | None) -> bool:
        return self.runtime.policy.may_act(HTTP_ACTOR, session_id, owner)

    async def _may_act(self, session_id: str) -> bool:
        """Whether the access policy lets HTTP act on `session_id` (see `agentrt.core.policy`)."""
        return self._policy_allows(session_id, await self.runtime.store.owner(session_id))

    def _session_json(
        self, session_id: str, info: TaskInfo | None, obj: dict[str, Any]
    ) -> dict[str, Any]:
        obj["origin"] = origin_of(session_id) or None
        obj["running_task"] = None if info is None else info.task_hash
        # Only tasks this front-end started can be stopped from it.
        obj["stoppable"] = info is not None and info.owner is self.owner
        obj["waiting_on"] = self._waiting_on(session_id, obj)
        return obj

    def _waiting_on(self, session_id: str, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """Who each open question of the session waits on (claimed by which front-end)."""
        waits: list[dict[str, Any]] = []
        for entry in self.runtime.registry.waiting_for(session_id):
            claimed = entry.claimed_by
            waits.append(
                {
                    "question_id": entry.id,
                    "kind": entry.request.kind.value,
                    "prompt": entry.request.prompt,
                    "who": (claimed.name or claimed.prefix or "a listener")
                    if claimed is not None
                    else None,
                }
            )
        if not waits and obj.get("status") == "awaiting_answer" and not obj.get("running"):
            question = obj.get("question") or {}
            waits.append(
                {
                    "question_id": question.get("id"),
                    "kind": question.get("kind", "question"),
                    "prompt": question.get("prompt", ""),
                    "who": "saved: answer it to resume",
                }
            )
        return waits

    # -- questions --------------------------------------------------------

    def questions(self, session: str | None = None) -> list[dict[str, Any]]:
        """The questions the `chat-` listener claimed and nobody has answered yet; with
        `session`, only that session's (what a view of that one chat shows)."""
        return [
            question_to_json(e)
            for e in self._desk.entries()
            if not e.done and self._shows(e, session)
        ]

    def _shows(self, entry: Entry, session: str | None) -> bool:
        """Whether a view of `session` (of every session HTTP may see: None) shows `entry`.

        By the access policy, as every other session HTTP acts on, and by session: a
        question belongs to the view of its own chat and of no other.
        """
        ctx = entry.context
        return self._policy_allows(ctx.session_id, ctx.window_hash) and session in (
            None,
            ctx.session_id,
        )

    def answer(
        self, question_id: str, value: str, secret: str | None, session: str | None = None
    ) -> None:
        """Answer a claimed question; with `session`, only a question of that session.

        Raises `ApiError` for an unknown id (and for one of a session HTTP may
        not act on, or of another session than `session`, in the same words),
        `LateAnswerError` for one that no longer waits (answered, withdrawn,
        expired: the message says which), and `BadAnswerError` for an answer
        that does not fit (`Entry.check`: the rules of every front-end).
        """
        entry = self._desk.find(question_id)
        if entry is None or not self._shows(entry, session):
            if entry is None:
                late = self._desk.late(
                    question_id,
                    lambda ctx: (
                        self._policy_allows(ctx.session_id, ctx.window_hash)
                        and session in (None, ctx.session_id)
                    ),
                )
                if late is not None:
                    raise late
            where = f" of session {session}" if session is not None else ""
            raise ApiError(
                404,
                "unknown_question",
                f"no open question {question_id!r}{where}; list them at /v1/questions",
            )
        self._desk.answer(entry, Answer(value, secret=secret))

    async def serve_questions(self) -> None:
        """Claim every `chat-` question as it is asked and show it to the subscribers."""
        await self._desk.serve()

    def _forward(self, entry: Entry) -> None:
        self._publish({"type": "question", **question_to_json(entry)})

    async def _question_closed(self, entry: Entry, state: EntryState, shown: None) -> None:
        self._publish(
            {
                "type": "question_closed",
                "id": entry.id,
                "session_id": entry.context.session_id,
                # "withdrawn": the run was stopped before an answer came.
                "state": state.value if state is not EntryState.CLAIMED else "claimed",
            }
        )

    # -- the event feed ---------------------------------------------------

    @contextmanager
    def subscribe(
        self, *, after: int | None = None, session: str | None = None
    ) -> Iterator[Subscription]:
        """Follow the feed from now on: every event and question (of `session`, if given).

        With `after` (a client's ``Last-Event-ID``), the kept events after it
        are handed over to be sent first; nothing is missed or sent twice
        between them and the live ones. The channel is closed if its reader
        falls `SUBSCRIBER_BUFFER` events behind.
        """
        replay: list[StreamItem] = []
        lost = False
        start = self._last_id
        if after is not None:
            if max(self._base, self._dropped) <= after <= self._last_id:
                start = after
                replay = [
                    item
                    for item in self._ring
                    if item.id > after and session in (None, item.session_id)
                ]
            else:
                lost = True
        send, receive = trio.open_memory_channel[StreamItem](SUBSCRIBER_BUFFER)
        self._subscribers[send] = session
        try:
            yield Subscription(start, replay, lost, receive)
        finally:
            self._subscribers.pop(send, None)
            send.close()
            receive.close()

    @property
    def last_event_id(self) -> int:
        """The id of the newest event (the first id less one, before any)."""
        return self._last_id

    def _publish_event(self, session_id: str, event: Event) -> None:
        self._publish(event_to_json(session_id, event))

    def _publish(self, obj: dict[str, Any]) -> None:
        self._last_id += 1
        session_id = obj.get("session_id")
        item = StreamItem(
            self._last_id,
            session_id if isinstance(session_id, str) else None,
            json.dumps(obj, ensure_ascii=False, separators=(",", ":")),
        )
        if len(self._ring) == self._ring.maxlen:
            self._dropped = self._ring[0].id
        self._ring.append(item)
        for send, wanted in list(self._subscribers.items()):
            if wanted is not None and wanted != item.session_id:
                continue
            try:
                send.send_nowait(item)
            except trio.WouldBlock:
                # A stalled page must not hold up runs: drop it; it reconnects with the id
                # of the last event it read and is sent the rest.
                log.info("dropping an event subscriber that fell %d behind", SUBSCRIBER_BUFFER)
                self._subscribers.pop(send, None)
                send.close()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.pop(send, None)

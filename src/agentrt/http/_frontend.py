"""The web front-end's state: its runs, its `chat-` listener, and the live event feed.

One `WebFrontEnd` serves one HTTP server. It owns the runs started over HTTP
(they run in the server's nursery, since `Executor.run` blocks until a run
ends), holds the server's single ``"chat-"`` listener, and fans events and
claimed questions out to every subscriber of `/v1/events`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import attrs
import trio

from .._cause import Cause
from .._context import origin_of
from .._events import Event, RunEnded
from .._executor import (
    NoPendingTaskError,
    NotOwnerError,
    SessionBusyError,
    TaskInfo,
    UnknownTaskError,
    check_session_id,
)
from .._pending import (
    Answer,
    Entry,
    EntryState,
    Listener,
)
from .._policy import Actor
from .._runtime import Runtime
from .._shapes import event_to_json, question_to_json, task_to_json, unreadable_to_json
from .._store import UnreadableTask
from .._vocab import WEB
from ._wire import ApiError

log = logging.getLogger("agentrt.http")

#: Events a subscriber may fall behind by before it is dropped (its page reconnects).
SUBSCRIBER_BUFFER = 1024
#: The origin of sessions created over HTTP whose id names no origin.
DEFAULT_ORIGIN = WEB
#: The name the web listener shows in "waiting on".
LISTENER_NAME = "web"


#: Who HTTP requests act as, for the access policy.
HTTP_ACTOR = Actor.http()


def session_id_from_path(raw: str) -> str:
    """The session a path names: ids without a known origin are `chat-` sessions."""
    check_session_id(raw)
    session_id = raw if origin_of(raw) else DEFAULT_ORIGIN + raw
    return check_session_id(session_id)


@attrs.define(eq=False)
class HttpOwner:
    """The owner of every run started over HTTP with one token."""

    name: str = "http"
    #: What a cancel from the HTTP API of another daemon of the fleet may stop (see
    #: `Executor.cancel_from`): runs started over HTTP.
    kind: str = "http"


@attrs.define(eq=False)
class WebFrontEnd:
    """Runs, questions and events of the HTTP API and the web page."""

    runtime: Runtime
    nursery: trio.Nursery
    listener: Listener
    owner: HttpOwner = attrs.field(factory=HttpOwner)
    _questions: dict[str, Entry] = attrs.field(factory=dict, init=False)
    _subscribers: set[trio.MemorySendChannel[dict[str, Any]]] = attrs.field(factory=set, init=False)

    # -- runs ---------------------------------------------------------------

    async def start_run(self, session_id: str, text: str) -> str:
        """Start `text` as a new task of `session_id` in the server's nursery; return its hash.

        Returns once the run has emitted its first event, so a cancel naming
        the hash works at once. Errors before that (a pending task exists, the
        session is running) are raised here.
        """
        if not self.runtime.policy.may_start(HTTP_ACTOR, session_id, None):
            raise ApiError(
                400,
                "bad_session_id",
                f"the HTTP API starts runs in {DEFAULT_ORIGIN!r} sessions only, not "
                f"{session_id!r}; name the session without a prefix or with {DEFAULT_ORIGIN!r}",
            )
        run = partial(self.runtime.executor.run, session_id, text)
        return await self._start(session_id, run)

    async def resume(self, session_id: str, answer: str | None) -> str:
        """Resume the pending task of `session_id` (answering its saved question); return its hash."""
        if not await self._may_act(session_id):
            raise NoPendingTaskError(f"session {session_id} has no pending task")
        resume = partial(self.runtime.executor.resume, session_id, answer=answer)
        return await self._start(session_id, resume)

    async def _start(self, session_id: str, start: Callable[..., Awaitable[RunEnded]]) -> str:
        """Start a run in the server's nursery: from its first event on it belongs there."""

        async def emit(event: Event) -> None:
            self._publish_event(session_id, event)

        info: TaskInfo = await self.nursery.start(partial(start, owner=self.owner, emit=emit))
        return info.task_hash

    def cancel(self, task_hash: str, *, pause: bool) -> TaskInfo:
        """Stop a task started over HTTP: pause keeps its pending task, otherwise it is dropped."""
        cause = Cause.PAUSE if pause else Cause.USER_CANCEL
        try:
            return self.runtime.executor.cancel(task_hash, cause, owner=self.owner)
        except NotOwnerError:
            # Answered as an unknown hash, so no one can probe for other front-ends' tasks.
            raise UnknownTaskError(
                f"no running task {task_hash!r}: unknown or already finished"
            ) from None

    async def cancel_anywhere(self, task_hash: str, *, pause: bool) -> TaskInfo:
        """`cancel`, or in a fleet, the cancel of a task started over HTTP on another daemon."""
        try:
            return self.cancel(task_hash, pause=pause)
        except UnknownTaskError:
            fleet = self.runtime.fleet
            if fleet is None:
                raise
        cause = Cause.PAUSE if pause else Cause.USER_CANCEL
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
        """The pending task of `session_id` as JSON, or None."""
        record = await self.runtime.store.load(session_id)
        if record is None or not self._policy_allows(record.session_id, record.window_hash):
            return None
        obj = task_to_json(record, running=self.runtime.executor.is_running(session_id))
        obj["waiting_on"] = self._waiting_on(session_id, obj)
        return obj

    async def sessions(self) -> list[dict[str, Any]]:
        """Sessions with a pending task or a running task, most recently active first."""
        executor = self.runtime.executor
        running = {info.session_id: info for info in executor.running()}
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for record in await self.runtime.store.list_stored():
            if not self._policy_allows(record.session_id, record.window_hash):
                continue
            seen.add(record.session_id)
            info = running.get(record.session_id)
            if isinstance(record, UnreadableTask):
                # Listed, so that it can be seen and discarded; the rest stay usable.
                obj = unreadable_to_json(record, running=info is not None)
            else:
                obj = task_to_json(record, running=info is not None)
            out.append(self._session_json(record.session_id, info, obj))
        for session_id, info in running.items():
            if session_id not in seen and self._policy_allows(session_id, info.window_hash):
                out.append(
                    self._session_json(
                        session_id,
                        info,
                        {"session_id": session_id, "status": "running", "running": True},
                    )
                )
        return out

    def _policy_allows(self, session_id: str, owner: str | None) -> bool:
        return self.runtime.policy.may_act(HTTP_ACTOR, session_id, owner)

    async def _may_act(self, session_id: str) -> bool:
        """Whether the access policy lets HTTP act on `session_id` (see `agentrt._policy`)."""
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
                    "question_id": None,
                    "kind": question.get("kind", "question"),
                    "prompt": question.get("prompt", ""),
                    "who": "saved: answer it to resume",
                }
            )
        return waits

    # -- questions --------------------------------------------------------

    def questions(self) -> list[dict[str, Any]]:
        """The questions the `chat-` listener claimed and nobody has answered yet."""
        return [question_to_json(e) for e in self._questions.values() if not e.done]

    def answer(self, question_id: str, value: str, secret: str | None) -> None:
        """Answer a claimed question.

        Raises `ApiError` for an unknown id, and `BadAnswerError` for an answer
        that does not fit (`Request.check`: the rules of every front-end).

        The registry raises `EntryGoneError` when the question's run stopped meanwhile.
        """
        entry = self._questions.get(question_id)
        if entry is None:
            raise ApiError(
                404,
                "unknown_question",
                f"no open question {question_id!r}; list them at /v1/questions",
            )
        entry.answer(entry.check(Answer(value, secret=secret)))

    async def serve_questions(self) -> None:
        """Claim every `chat-` question as it is asked and show it to the subscribers."""
        async with trio.open_nursery() as nursery:
            while True:
                entry = await self.listener.claim()
                self._questions[entry.id] = entry
                self._publish({"type": "question", **question_to_json(entry)})
                nursery.start_soon(self._watch_question, entry)

    async def _watch_question(self, entry: Entry) -> None:
        state = await entry.wait_done()
        self._questions.pop(entry.id, None)
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
    def subscribe(self) -> Iterator[trio.MemoryReceiveChannel[dict[str, Any]]]:
        """A channel of every event and question from now on; closed if it falls behind."""
        send, receive = trio.open_memory_channel[dict[str, Any]](SUBSCRIBER_BUFFER)
        self._subscribers.add(send)
        try:
            yield receive
        finally:
            self._subscribers.discard(send)
            send.close()
            receive.close()

    def _publish_event(self, session_id: str, event: Event) -> None:
        self._publish(event_to_json(session_id, event))

    def _publish(self, obj: dict[str, Any]) -> None:
        for send in list(self._subscribers):
            try:
                send.send_nowait(obj)
            except trio.WouldBlock:
                # A stalled page must not hold up runs: drop it; EventSource reconnects.
                log.info("dropping an event subscriber that fell %d behind", SUBSCRIBER_BUFFER)
                self._subscribers.discard(send)
                send.close()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.discard(send)

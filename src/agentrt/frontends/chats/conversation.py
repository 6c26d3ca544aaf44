"""What the Telegram and Discord front-ends share: the conversation with the runtime.

A chat service only moves text and button presses. Everything else is the
same for both and lives here, in `ChatBridge`: who may talk to the agent (an
allow-list of user ids), which message starts a run and which one answers a
parked question, the ``/pending``, ``/stop`` and ``/pause`` commands, the
listener that claims the registry's questions for the service's prefix and
shows them with buttons, the streaming of a run's text into one message
that is edited as the text grows (`ChatOutput`), and a typing indicator
repeated while a run works.

A front-end implements `ChatTransport` (send a message, edit a message, show
that the bot is typing, measure text as the service counts it) and feeds the
bridge what arrives: `on_message` for text, `on_button` for a press, and
`command` for a command that came some other way (a Discord slash command).

Questions survive the service's connection: the listener belongs to the
bridge, not to a connection, so a dropped long poll or gateway keeps every
claimed question open, and a delivery that fails is retried until it is
delivered or its question is gone. An entry is answered at most once: a
second press of the same button, or a replayed press, gets a polite answer
saying why (answered already, and when) and changes nothing.

Every button carries the id of its question (``q-...:a``), and a message
answers the question this chat was last shown: an answer is never taken for
another question. A press for a question the chat's task no longer waits for
is refused saying why; a message meant for a question that is no longer the
one waiting is not taken, and the one waiting is shown instead.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import re
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Final
from typing import Protocol

import attrs
import trio

from ...agent.preview import resume_preview
from ...config.settings import ConfigError
from ...core.cause import Cause
from ...core.desk import REFUSED
from ...core.desk import Desk
from ...core.desk import refusal
from ...core.executor import BadAnswerError
from ...core.executor import Executor
from ...core.executor import NoPendingTaskError
from ...core.executor import NotOwnerError
from ...core.executor import PendingTaskExistsError
from ...core.executor import SessionBusyError
from ...core.executor import UnknownTaskError
from ...core.pending import ALLOW_ONCE
from ...core.pending import ALLOW_SESSION
from ...core.pending import DENY
from ...core.pending import AlreadyAnsweredError
from ...core.pending import Answer
from ...core.pending import Entry
from ...core.pending import EntryGoneError
from ...core.pending import EntryState
from ...core.pending import RequestKind
from ...core.policy import origin_rules
from ...present.ends import describe_end
from ...present.preview import preview_lines
from ...vocab.events import Event
from ...vocab.events import Outcome
from ...vocab.events import RunEnded
from ...vocab.events import TextEvent
from ...vocab.events import ToolCallEvent
from ...vocab.events import ToolResultEvent
from ...vocab.questions import QuestionState
from ...vocab.questions import late_answer
from ...vocab.reprs import mutable
from ...vocab.reprs import record

log = logging.getLogger("agentrt.bots")

#: How long to wait before retrying a question whose delivery failed, at most.
_MAX_REDELIVERY_DELAY = 30.0

CHOICE_LABELS: dict[str, str] = {
    ALLOW_ONCE: "Allow once",
    ALLOW_SESSION: "Allow for this session",
    DENY: "Deny",
}
#: What a pressed choice is called afterwards, in the edited question.
CHOICE_DONE: dict[str, str] = {
    ALLOW_ONCE: "allowed once",
    ALLOW_SESSION: "allowed for this session",
    DENY: "denied",
}
# Button data must stay short (Telegram allows 64 bytes of callback data).
_CHOICE_CODES: dict[str, str] = {ALLOW_ONCE: "a", ALLOW_SESSION: "s", DENY: "d"}
_CODE_CHOICES: dict[str, str] = {v: k for k, v in _CHOICE_CODES.items()}

ALREADY_ANSWERED = "This question was already answered or is no longer waiting."
NOT_ALLOWED_BUTTON = "Sorry, only the people this bot works for can answer its questions."

HELP = (
    "Send a message to start a task. While a task runs:\n"
    "/stop - stop it and throw the task away\n"
    "/pause - stop it but keep the task\n"
    "/pending - show or resume this chat's paused task\n"
    "When the agent asks a question, your next message answers it; "
    "tool confirmations come with buttons."
)


class DeliveryError(Exception):
    """A chat service did not take a message, even after retries; says why."""


@record
class Button:
    """One button under a message: its label and the data its press sends back."""

    label: str
    data: str


class ChatTransport(Protocol):
    """What a chat service must offer the bridge."""

    #: The longest text one message may hold, as `text_length` counts it.
    max_text: int
    #: Seconds between two typing indicators while a run works (each shows for a
    #: little longer than that on the service).
    typing_every: float

    def text_length(self, text: str) -> int:
        """How long `text` is for the service's limit (Telegram counts UTF-16 code units)."""
        ...

    async def send(
        self, chat: str, text: str, buttons: Sequence[Button] = (), *, markdown: bool = False
    ) -> str:
        """Post `text` (with `buttons`, one row) to `chat`; return the message id.

        `markdown` says the text is the model's reply, written in Markdown, to be
        shown formatted; anything else is shown exactly as it is. Raises
        `DeliveryError` when the service would not take it.
        """
        ...

    async def edit(self, chat: str, message_id: str, text: str, *, markdown: bool = False) -> None:
        """Replace a message's text and remove its buttons; raises `DeliveryError`."""
        ...

    async def typing(self, chat: str) -> None:
        """Show in `chat` that the bot is working on a reply; raises `DeliveryError`."""
        ...


def parse_allow(raw: str | None) -> frozenset[str]:
    """An allow-list from ``"123, 456 789"`` (commas or spaces); empty for None."""
    if not raw:
        return frozenset()
    return frozenset(part for part in raw.replace(",", " ").split() if part)


def read_env(
    env: Mapping[str, str], service: str, *, token_hint: str, allow_hint: str
) -> tuple[str, frozenset[str], str | None]:
    """``AGENTRT_<SERVICE>_TOKEN``, ``_ALLOW`` and ``_API`` of a chat service: (token, allow, api).

    Raises `ConfigError` naming the variable when the token is missing; warns when
    nobody is allowed (the bot would refuse everyone).
    """
    prefix = f"AGENTRT_{service.upper()}"
    token = env.get(f"{prefix}_TOKEN", "").strip()
    if not token:
        raise ConfigError(f"the {service} bot needs {prefix}_TOKEN ({token_hint})")
    allow = parse_allow(env.get(f"{prefix}_ALLOW"))
    if not allow:
        log.warning(
            "%s_ALLOW is empty: the %s bot will refuse everyone; set it to %s",
            prefix,
            service,
            allow_hint,
        )
    return token, allow, env.get(f"{prefix}_API", "").strip() or None


def parse_command(text: str) -> str | None:
    """The command of ``/stop`` or ``/stop@SomeBot`` (also ``!stop``), lower-case; else None."""
    text = text.strip()
    if len(text) < 2 or text[0] not in "/!":
        return None
    word = text[1:].split(maxsplit=1)[0] if text[1:].split() else ""
    name = word.split("@", 1)[0].lower()
    return name if name.isalpha() else None


def utf16_length(text: str) -> int:
    """`text`'s length in UTF-16 code units: a character beyond the BMP (most emoji) is two."""
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)


def split_text(text: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """`text` cut into pieces of at most `limit` (as `measure` counts), at a newline when one is near.

    A piece never ends in the middle of a character, whatever `measure` counts.
    """
    pieces: list[str] = []
    while measure(text) > limit:
        fit = _fitting(text, limit, measure)
        cut = text.rfind("\n", fit // 2, fit)
        cut = fit if cut <= 0 else cut + 1
        pieces.append(text[:cut])
        text = text[cut:]
    pieces.append(text)
    return pieces


def _fitting(text: str, limit: int, measure: Callable[[str], int]) -> int:
    """The most characters of `text` whose `measure` is at most `limit` (at least one)."""
    low, high = 1, min(len(text), limit)  # every measure counts a character as one or more
    while low < high:
        middle = (low + high + 1) // 2
        if measure(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    return low


# --------------------------------------------------------------------------- output


@mutable(eq=False)
class _Segment:
    text: str
    #: Sealed segments take no more text; the last unsealed one grows.
    sealed: bool = False
    #: The model's reply (Markdown, shown formatted), not a notice of ours.
    markdown: bool = False
    message_id: str | None = None
    shown: str = ""
    failures: int = 0

    @property
    def settled(self) -> bool:
        return self.sealed and (self.shown == self.text or not self.text.strip())


@mutable(eq=False)
class ChatOutput:
    """What one run shows in one chat, in order: streamed text and notices.

    Streamed text goes into one message that is edited as it grows, at most
    once per `interval` seconds (chat services limit edits); a notice (a
    refused tool, the question the run parked on, how it ended) closes the
    current text message and is sent as a message of its own. `emit` never
    blocks and never raises, so a slow or failing chat service cannot stall or
    fail the run; `pump` does the sending.
    """

    transport: ChatTransport
    chat: str
    interval: float = 1.0
    _segments: list[_Segment] = attrs.field(factory=list, init=False)
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _after_tool: bool = attrs.field(default=False, init=False)
    ended: RunEnded | None = attrs.field(default=None, init=False)

    def add_text(self, text: str) -> None:
        """Append streamed text to the growing message."""
        if not text:
            return
        if self._after_tool:
            # A new model round after tool calls: a new paragraph, not a run-on word.
            self._after_tool = False
            if self._segments and not self._segments[-1].sealed and self._segments[-1].text:
                text = "\n\n" + text.lstrip()
        if not self._segments or self._segments[-1].sealed:
            self._segments.append(_Segment("", markdown=True))
        last = self._segments[-1]
        pieces = self._split(last.text + text)
        last.text = pieces[0]
        for piece in pieces[1:]:
            last.sealed = True
            last = _Segment(piece, markdown=True)
            self._segments.append(last)
        self._changed.set()

    def notice(self, text: str) -> None:
        """Close the growing message and queue `text` as messages of its own."""
        if self._segments:
            self._segments[-1].sealed = True
        for piece in self._split(text):
            self._segments.append(_Segment(piece, sealed=True))
        self._changed.set()

    def _split(self, text: str) -> list[str]:
        return split_text(text, self.transport.max_text, self.transport.text_length)

    async def emit(self, event: Event) -> None:
        """The executor's `emit`: turns a run's events into text for the chat."""
        if isinstance(event, TextEvent):
            if not event.agent:  # a subagent's words reach the chat through its parent's answer
                self.add_text(event.text)
        elif isinstance(event, ToolCallEvent):
            if not event.agent:
                self._after_tool = True
            if event.may_have_run:
                self.notice(f"⚠️ {event.name}: {event.may_have_run}")
        elif isinstance(event, ToolResultEvent):
            if not event.ok:
                # A refused or failed tool is shown as it is: the secret and password
                # refusals in particular must reach the user, not only the model.
                self.notice(f"⚠️ {event.name}: {event.preview}")
        elif isinstance(event, RunEnded):
            self.ended = event
            self._end(event)

    def _end(self, ended: RunEnded) -> None:
        said = describe_end(ended).chat
        if ended.outcome is Outcome.FINISHED:
            if not any(s.text.strip() for s in self._segments):
                self.add_text(ended.text or said)
        elif ended.outcome is Outcome.AWAITING_ANSWER:
            self.notice(f"{said}\n(Your next message answers this question.)")
        elif ended.outcome is Outcome.FAILED:
            self.notice(f"{said}\n/pending tries again.")
        elif not ended.pending_kept:
            self.notice(said)
        elif ended.cause is Cause.PAUSE:
            self.notice(f"{said} /pending resumes the task, /stop throws it away.")
        else:
            self.notice(f"{said} /pending resumes the task.")

    def close(self) -> None:
        """No more output will come: `pump` sends what is left, then returns."""
        if self._segments:
            self._segments[-1].sealed = True
        self._closed.set()
        self._changed.set()

    async def pump(self) -> None:
        """Send and edit messages until `close` was called and everything is shown."""
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            edited = await self._flush()
            if self._closed.is_set() and all(s.settled for s in self._segments):
                return
            if edited:
                # Throttle edits, but do not hold back the end of the run.
                with trio.move_on_after(self.interval):
                    await self._closed.wait()

    async def _flush(self) -> bool:
        edited = False
        for segment in self._segments:
            if segment.settled:
                continue
            text = segment.text
            if not text.strip():
                continue
            try:
                if segment.message_id is None:
                    segment.message_id = await self.transport.send(
                        self.chat, text, markdown=segment.markdown
                    )
                else:
                    await self.transport.edit(
                        self.chat, segment.message_id, text, markdown=segment.markdown
                    )
                    edited = True
                segment.shown = text
            except DeliveryError as exc:
                segment.failures += 1
                log.warning("chat %s: could not show a message: %s", self.chat, exc)
                if segment.failures >= 3:
                    segment.shown = segment.text  # give up on this piece, keep the rest flowing
                    segment.sealed = True
                else:
                    self._changed.set()
                return True
        return edited


# --------------------------------------------------------------------------- prompts


class _PromptKind(enum.Enum):
    #: A live registry entry: a press answers it.
    ENTRY = "entry"
    #: A confirmation saved in a parked task: a press resumes the task with the choice.
    SAVED = "saved"


@mutable(eq=False)
class _Prompt:
    chat: str
    kind: _PromptKind
    entry: Entry | None = None
    session_id: str = ""
    choice: str | None = None
    used: bool = False
    #: Its key in `ChatBridge._prompts`: the question's id, which its buttons carry.
    token: str = ""
    #: A live entry's text and buttons, and the id of the message that shows them once
    #: delivered.
    text: str = ""
    buttons: Sequence[Button] = ()
    message_id: str | None = None
    #: The text is Markdown (it holds a diff as a code block).
    markdown: bool = False


@record
class ButtonReply:
    """What a button press did: `text` for the presser, `ok` when it changed something."""

    ok: bool
    text: str


# --------------------------------------------------------------------------- the bridge


@mutable(eq=False)
class ChatBridge:
    """One chat service's link to the runtime (see the module docstring).

    Start it with ``await nursery.start(bridge.serve)``; runs it starts live in
    that nursery and end (with `Cause.SHUTDOWN`, keeping their tasks) when it
    is cancelled.
    """

    executor: Executor
    transport: ChatTransport
    #: The origin: ``"tg-"`` or ``"dc-"``.
    prefix: str
    #: User ids allowed to talk to the agent; empty lets nobody in.
    allow: frozenset[str]
    #: The service's name, for the user's eyes.
    service: str
    #: The environment variable that holds the allow-list, named in refusals.
    allow_env: str
    edit_interval: float = 1.0
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    #: The questions shown with buttons (or waiting for a message), by question id.
    _prompts: dict[str, _Prompt] = attrs.field(factory=dict, init=False)
    #: The id of the saved question each chat was last shown: its next message answers it.
    _shown: dict[str, str] = attrs.field(factory=dict, init=False)
    _active: int = attrs.field(default=0, init=False)
    _idle: trio.Event = attrs.field(factory=trio.Event, init=False)

    def session_of(self, chat: str) -> str:
        """The session id of a chat's conversation: ``tg-<chat id>`` or ``dc-<channel id>``."""
        return f"{self.prefix}{chat}"

    def is_allowed(self, user: str) -> bool:
        """Whether `user` is on the allow-list."""
        return user in self.allow

    def refusal(self, user: str) -> str:
        """The polite answer to someone not on the allow-list."""
        return (
            "Sorry, this bot only works for the people it was set up for. "
            f"(Your {self.service} user id is {user}; its owner can add it to {self.allow_env}.)"
        )

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim this prefix's questions and keep the runs; until cancelled."""
        desk = Desk.open(
            self.executor.registry,
            self.prefix,
            name=f"{self.service} bot",
            forward=self._forward,
            deliver=self._deliver,
            closed=self._question_closed,
        )
        try:
            # The nursery closes before the listener: runs end as a shutdown (keeping
            # their tasks) before the listener fails the questions it still holds.
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                try:
                    await desk.serve()
                finally:
                    self._nursery = None
        finally:
            desk.close()

    async def wait_idle(self) -> None:
        """Wait until every run started here has ended and its output is shown."""
        while self._active:
            await self._idle.wait()

    # -- what arrives -----------------------------------------------------

    async def on_message(self, chat: str, user: str, text: str) -> None:
        """A text message from `user` in `chat`."""
        if not self.is_allowed(user):
            log.info("%s: refused a message from user %s", self.service, user)
            await self.say(chat, self.refusal(user))
            return
        text = text.strip()
        if not text:
            return
        command = parse_command(text)
        if command is not None:
            await self._command(chat, command, lambda said: self.say(chat, said))
            return
        session = self.session_of(chat)
        # A question asked inline (by a subagent) waits for this chat's next message.
        for prompt in self._prompts.values():
            entry = prompt.entry
            if (
                prompt.chat == chat
                and entry is not None
                and not entry.done
                and entry.request.kind is RequestKind.QUESTION
            ):
                self._answer_entry(prompt, text)
                return
        if self.executor.is_running(session):
            await self.say(
                chat, "Still working on your last message. /stop or /pause it to send a new one."
            )
            return
        record = await self.executor.store.load(session)
        if record is None:
            self._start(chat, lambda emit: self._run(session, text, emit))
            return
        question = record.question
        if question is not None and question.kind is RequestKind.QUESTION:
            shown = self._shown.get(chat)
            if shown != question.id:
                # This chat was not shown the question waiting now (it was saved after the
                # one this message answers, or before this bot started): it is not taken
                # for its answer; the question is shown, and the next message answers it.
                if shown is not None:
                    await self.say(
                        chat, _sentence(late_answer(shown, record.questions, question.id))
                    )
                await self._show_saved(chat, question.id, question.prompt)
                return
            asked = question.id
            self._start(
                chat, lambda emit: self._resume(session, emit, answer=text, question_id=asked)
            )
        elif question is not None and question.kind is RequestKind.CONFIRM:
            await self.say(chat, "The paused task is waiting for a confirmation:")
            await self._offer_saved(chat, session, question.id, question.prompt)
        else:
            await self.say(
                chat,
                "This chat has a paused task. /pending resumes it; /stop throws it away "
                "so you can start a new one.",
            )

    async def on_button(self, chat: str, user: str, data: str) -> ButtonReply:
        """A press of one of our buttons; the reply is for the presser's eyes.

        A button carries its question's id. A live question of this chat is
        answered at once; otherwise the chat's kept task is resumed with the
        choice if it waits for that very question, and the press is refused,
        saying why, if it does not.
        """
        if not self.is_allowed(user):
            log.info("%s: refused a button press from user %s", self.service, user)
            return ButtonReply(False, NOT_ALLOWED_BUTTON)
        question_id, _, code = data.partition(":")
        choice = _CODE_CHOICES.get(code)
        if choice is None or not question_id:
            return ButtonReply(False, ALREADY_ANSWERED)  # none of ours: forged, or garbled
        prompt = self._prompts.get(question_id)
        if prompt is not None and prompt.chat != chat:
            return ButtonReply(False, "That button belongs to another chat.")
        if prompt is not None and prompt.kind is _PromptKind.ENTRY:
            assert prompt.entry is not None
            if prompt.entry.request.kind is not RequestKind.CONFIRM:
                return ButtonReply(False, ALREADY_ANSWERED)
            return self._answer_entry(prompt, choice)
        if prompt is not None and prompt.used:
            return ButtonReply(False, "This question is being answered already.")
        return await self._press_saved(chat, question_id, choice, prompt)

    async def _press_saved(
        self, chat: str, question_id: str, choice: str, prompt: _Prompt | None
    ) -> ButtonReply:
        """A press for a question this bot holds no live entry of: resume the chat's task with
        the choice if it waits for that question; else say why not."""
        session = self.session_of(chat)
        record = await self.executor.store.load(session)
        question = record.question if record is not None else None
        if record is not None and question is not None and question.id == question_id:
            if question.kind is not RequestKind.CONFIRM:
                return ButtonReply(False, ALREADY_ANSWERED)
            if prompt is not None:
                prompt.used = True
                prompt.choice = choice
            self._start(
                chat,
                lambda emit: self._resume(session, emit, answer=choice, question_id=question_id),
            )
            return ButtonReply(True, CHOICE_DONE[choice].capitalize())
        # Why not, from the newest of what this process saw of it and what the task recorded.
        known = [t for t in record.questions if t.id == question_id] if record is not None else []
        settled = self.executor.registry.settled(question_id)
        if settled is not None and settled.context.session_id == session:
            known.append(settled.trace)
        ended = [t for t in known if t.state is not QuestionState.WAITING]
        if ended:
            return ButtonReply(False, _sentence(max(ended, key=lambda t: t.at).refusal()))
        if record is None:
            return ButtonReply(False, "No pending task in this chat waits for this question.")
        waiting = question.id if question is not None else None
        return ButtonReply(False, _sentence(late_answer(question_id, record.questions, waiting)))

    def _answer_entry(self, prompt: _Prompt, value: str) -> ButtonReply:
        assert prompt.entry is not None
        try:
            Desk.answer(prompt.entry, Answer(value))
        except BadAnswerError:
            # Only a forged or stale press offers a choice the question does not take.
            return ButtonReply(False, ALREADY_ANSWERED)
        except (AlreadyAnsweredError, EntryGoneError) as exc:
            # Why: answered already (and when), withdrawn as its task stopped, expired.
            return ButtonReply(False, _sentence(str(exc)))
        prompt.used = True
        prompt.choice = value
        return ButtonReply(True, CHOICE_DONE.get(value, "answered").capitalize())

    # -- commands ---------------------------------------------------------

    async def command(
        self, chat: str, user: str, name: str, reply: Callable[[str], Awaitable[None]]
    ) -> None:
        """Carry out command `name` (``stop``, ``pause``, ``pending``, ``help``) for `user`.

        What the command has to say goes to `reply` instead of the chat (a slash
        command answers its own interaction); a run it starts still shows its
        output in the chat.
        """
        if not self.is_allowed(user):
            log.info("%s: refused a command from user %s", self.service, user)
            await reply(self.refusal(user))
            return
        await self._command(chat, name, reply)

    async def _command(
        self, chat: str, command: str, say: Callable[[str], Awaitable[None]]
    ) -> None:
        session = self.session_of(chat)
        if command in ("start", "help"):
            await say(HELP)
        elif command in ("stop", "pause"):
            cause = Cause.USER_CANCEL if command == "stop" else Cause.PAUSE
            await self._stop(session, cause, say)
        elif command == "pending":
            await self._pending(chat, session, say)
        else:
            await say(f"Unknown command /{command}.\n\n{HELP}")

    async def _stop(
        self, session: str, cause: Cause, say: Callable[[str], Awaitable[None]]
    ) -> None:
        tasks = [t for t in self.executor.running(owner=self) if t.session_id == session]
        if tasks:
            for info in tasks:
                # A task that ended meanwhile has already said how it ended.
                with contextlib.suppress(UnknownTaskError, NotOwnerError):
                    self.executor.cancel(info.task_hash, cause, owner=self)
            return  # the run's end message confirms the stop or pause
        if self.executor.is_running(session):
            await say("The task running here was not started from this chat.")
        elif cause is Cause.PAUSE:
            await say("Nothing is running.")
        elif await self.executor.discard(session):
            await say("⏹ The paused task was thrown away.")
        else:
            await say("Nothing to stop.")

    async def _pending(
        self, chat: str, session: str, say: Callable[[str], Awaitable[None]]
    ) -> None:
        if self.executor.is_running(session):
            await say("A task is running. /stop or /pause it first.")
            return
        record = await self.executor.store.load(session)
        if record is None:
            await say("No pending task in this chat.")
            return
        question = record.question
        if question is None:
            # What the resume will do, in the words of every front-end, before it does it.
            lines = preview_lines(resume_preview(record))
            await say("\n".join([f"Resuming: {record.input}", *lines]))
            self._start(chat, lambda emit: self._resume(session, emit))
        elif question.kind is RequestKind.QUESTION:
            self._shown[chat] = question.id
            await say(f"❓ {question.prompt}\n(Your next message answers this question.)")
        elif question.kind is RequestKind.CONFIRM:
            await say("The paused task is waiting for a confirmation:")
            await self._offer_saved(chat, session, question.id, question.prompt)
        else:
            await say(
                "The paused task needs the system password, which never travels through "
                f"{self.service}. Resume it from the terminal (agenttui) or the web page."
            )

    async def _offer_saved(
        self, chat: str, session: str, question_id: str, prompt_text: str
    ) -> None:
        self._prompts[question_id] = _Prompt(
            chat, _PromptKind.SAVED, session_id=session, token=question_id
        )
        buttons = _buttons(question_id, (ALLOW_ONCE, ALLOW_SESSION, DENY))
        try:
            await self.transport.send(chat, f"🔐 Allow this?\n{prompt_text}", buttons)
        except DeliveryError as exc:
            self._prompts.pop(question_id, None)
            log.warning("chat %s: could not offer a saved confirmation: %s", chat, exc)

    async def _show_saved(self, chat: str, question_id: str, prompt_text: str) -> None:
        """Show the saved question `question_id`: the chat's next message answers it."""
        self._shown[chat] = question_id
        await self.say(chat, f"❓ {prompt_text}\n(Your next message answers this question.)")

    # -- runs -------------------------------------------------------------

    async def _run(self, session: str, text: str, emit: Callable[[Event], Awaitable[None]]) -> None:
        await self.executor.run(session, text, owner=self, emit=emit)

    async def _resume(
        self,
        session: str,
        emit: Callable[[Event], Awaitable[None]],
        answer: str | None = None,
        question_id: str | None = None,
    ) -> None:
        await self.executor.resume(
            session, owner=self, emit=emit, answer=answer, question_id=question_id
        )

    def _start(
        self, chat: str, go: Callable[[Callable[[Event], Awaitable[None]]], Awaitable[None]]
    ) -> None:
        if self._nursery is None:
            raise RuntimeError("ChatBridge.serve must be running before messages are handled")
        self._nursery.start_soon(self._drive, chat, go)

    async def _drive(
        self, chat: str, go: Callable[[Callable[[Event], Awaitable[None]]], Awaitable[None]]
    ) -> None:
        output = ChatOutput(self.transport, chat, self.edit_interval)
        self._active += 1
        try:
            await self._drive_output(output, go)
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()
                self._idle = trio.Event()

    async def _drive_output(
        self,
        output: ChatOutput,
        go: Callable[[Callable[[Event], Awaitable[None]]], Awaitable[None]],
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(output.pump)
            working = trio.CancelScope()
            nursery.start_soon(self._keep_typing, output.chat, working)
            try:
                await go(output.emit)
                ended = output.ended
                if ended is not None and ended.question_id is not None:
                    # The notice of the end shows the question: the chat's next message
                    # answers that one.
                    self._shown[output.chat] = ended.question_id
            except SessionBusyError:
                output.notice("Still working on your last message. /stop or /pause it first.")
            except (PendingTaskExistsError, NoPendingTaskError, BadAnswerError) as exc:
                output.notice(f"{exc}.")
            except REFUSED as exc:
                output.notice(f"Could not start: {refusal(exc).message}")
            finally:
                working.cancel()
                output.close()

    async def _keep_typing(self, chat: str, working: trio.CancelScope) -> None:
        """Show "typing" in `chat` every `typing_every` seconds until `working` is cancelled.

        Skipped while the run waits for a person's answer in this chat: the bot
        is not the one who should be typing then. A failure is only logged: the
        indicator is a courtesy, never a reason to stop a run.
        """
        with working:
            while True:
                if not self._waiting_for_answer(chat):
                    try:
                        await self.transport.typing(chat)
                    except DeliveryError as exc:
                        log.debug("chat %s: typing indicator not shown: %s", chat, exc)
                await trio.sleep(self.transport.typing_every)

    def _waiting_for_answer(self, chat: str) -> bool:
        return any(
            p.chat == chat and p.entry is not None and not p.entry.done
            for p in self._prompts.values()
        )

    # -- questions --------------------------------------------------------

    def _forward(self, entry: Entry) -> _Prompt | None:
        """Register a claimed question's prompt; None for one never to be shown here."""
        request = entry.request
        if request.masked and not origin_rules(self.prefix).takes_secrets:
            # The core refuses these for chat origins before asking; should one come
            # anyway, it is declined here and never shown as something to type.
            with contextlib.suppress(AlreadyAnsweredError, EntryGoneError):
                entry.answer(DENY)
            return None
        token = entry.id
        markdown = False
        if request.kind is RequestKind.CONFIRM:
            text = f"🔐 Allow this?\n{request.prompt}"
            buttons = _buttons(entry.id, request.choices or (ALLOW_ONCE, DENY))
            if request.diff:
                room = self.transport.max_text - self.transport.text_length(text) - _DIFF_MARGIN
                text = f"🔐 Allow this?\n{markdown_escape(request.prompt)}\n" + diff_block(
                    request.diff, room
                )
                markdown = True
        else:
            text = f"❓ {request.prompt}"
            buttons = []
        chat = entry.context.session_id.removeprefix(self.prefix)
        prompt = _Prompt(
            chat,
            _PromptKind.ENTRY,
            entry=entry,
            token=token,
            text=text,
            buttons=buttons,
            markdown=markdown,
        )
        self._prompts[token] = prompt
        return prompt

    async def _deliver(self, entry: Entry, prompt: _Prompt | None) -> None:
        """Send a question until it is delivered or no longer waits."""
        if prompt is None:
            await self.say(
                entry.context.session_id.removeprefix(self.prefix),
                f"🔒 Refused: {entry.request.prompt}. Secrets and passwords never travel "
                f"through {self.service}; use the terminal (agenttui) or the web page.",
            )
            return
        hint = "" if prompt.buttons else "\n(Your next message answers this question.)"
        delay = 0.5
        while not entry.done:
            try:
                prompt.message_id = await self.transport.send(
                    prompt.chat, prompt.text + hint, prompt.buttons, markdown=prompt.markdown
                )
                return
            except DeliveryError as exc:
                log.warning("chat %s: question not delivered yet, will retry: %s", prompt.chat, exc)
            with trio.move_on_after(delay):
                await entry.wait_done()
            delay = min(delay * 2, _MAX_REDELIVERY_DELAY)

    async def _question_closed(
        self, entry: Entry, state: EntryState, prompt: _Prompt | None
    ) -> None:
        """Mark a delivered question as settled in its message."""
        if prompt is None:
            return
        self._prompts.pop(prompt.token, None)
        if prompt.message_id is None:
            return
        if state is EntryState.ANSWERED:
            if entry.request.kind is RequestKind.CONFIRM and prompt.choice in CHOICE_DONE:
                outcome = f"✔ {CHOICE_DONE[prompt.choice].capitalize()}."
            else:
                outcome = "✔ Answered."
        elif state is EntryState.WITHDRAWN:
            outcome = "⌛ No longer needed: the task stopped."
        elif state is EntryState.EXPIRED:
            outcome = f"⌛ {_sentence(entry.trace.refusal())}"
        else:
            outcome = "✖ Not answered."
        try:
            await self.transport.edit(
                prompt.chat,
                prompt.message_id,
                f"{prompt.text}\n{outcome}",
                markdown=prompt.markdown,
            )
        except DeliveryError as exc:
            log.info("chat %s: could not mark a question as settled: %s", prompt.chat, exc)

    async def say(self, chat: str, text: str) -> None:
        """Send `text` to `chat`, logging (not raising) when the service refuses it."""
        for piece in split_text(text, self.transport.max_text, self.transport.text_length):
            try:
                await self.transport.send(chat, piece)
            except DeliveryError as exc:
                log.warning("chat %s: could not send a message: %s", chat, exc)
                return


#: Room kept in a question's message besides its text and diff (fences, a hint, the outcome).
_DIFF_MARGIN: Final = 200
#: The characters a chat's Markdown would take for formatting in a prompt.
_MARKDOWN_SPECIAL: Final = re.compile(r"([\\`*_~|\[\]<>#!])")


def markdown_escape(text: str) -> str:
    """`text` shown as it is in Markdown (Telegram's, as converted, and Discord's).

    A backslash before punctuation shows the punctuation in both (CommonMark and
    Discord's parser alike), so a path with ``*``, ``_`` or ``[x](y)`` in it reads as
    it will be used, never as formatting or a link.
    """
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def diff_block(diff: str, room: int) -> str:
    """`diff` as a fenced ``diff`` code block of at most about `room` characters.

    Cut at the end of a line, with a line saying how many more there were and
    where the whole change can be seen.
    """
    lines = diff.split("\n")
    shown: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > room:
            break
        shown.append(line)
        used += len(line) + 1
    more = len(lines) - len(shown)
    if more:
        shown.append(f"... {more} more lines (the terminal or the web page shows them all)")
    body = "\n".join(shown)
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}diff\n{body}\n{fence}"


def _buttons(question_id: str, choices: Sequence[str]) -> list[Button]:
    """The buttons of `choices`, each carrying the question's id and its choice."""
    return [
        Button(CHOICE_LABELS.get(c, c), f"{question_id}:{_CHOICE_CODES[c]}")
        for c in choices
        if c in _CHOICE_CODES
    ]


def _sentence(text: str) -> str:
    """`text` as a sentence for a chat: a capital first, a full stop last."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")

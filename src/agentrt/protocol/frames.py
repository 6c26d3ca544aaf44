"""The frames of the daemon protocol, and the one converter that (un)structures them.

Every frame is a frozen attrs class whose wire name is its ``TYPE``. On the
wire a frame is one JSON object on one line, with a ``type`` field naming it
(see `agentrt.codec` for the line framing and ``docs/protocol.md`` for the
whole conversation).

There are two unions: `ClientFrame` (what a client such as the terminal UI
sends to the daemon) and `DaemonFrame` (what the daemon sends back). Both
directions have a ``hello`` and a ``pending`` frame with different fields, so
a frame is always read as one union or the other, never guessed.

The frames a connection begins with (`Hello`, `Welcome`) and the refusal
(`ErrorFrame`, `ErrorCode`, `FrameError`) are defined in
`agentrt.protocol.handshake` and re-exported here: a client and the codec import
only those, and this module when the first frame is encoded or decoded.

Serialization happens only here, with `converter()`: primitives are checked
strictly (``"5"`` is not an int, ``1`` is not a bool), unknown fields are
refused, and a structuring error reads ``expected int @ $.attempts_left``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Final
from typing import Protocol
from typing import TypeVar
from typing import get_args

import attrs

from ..vocab.events import CompactionEvent
from ..vocab.events import Event
from ..vocab.events import ReasoningEvent
from ..vocab.events import RunEnded
from ..vocab.events import TaskStarted
from ..vocab.events import TextEvent
from ..vocab.events import ToolCallDeltaEvent
from ..vocab.events import ToolCallEvent
from ..vocab.events import ToolProgressEvent
from ..vocab.events import ToolResultEvent
from ..vocab.events import UsageEvent
from ..vocab.events import VerifyEvent
from ..vocab.reprs import record
from ..vocab.stops import ResumePreview
from ..vocab.terms import Cause
from ..vocab.terms import RequestKind
from ..vocab.usage import RunTokens
from .handshake import PROTOCOL_VERSION as PROTOCOL_VERSION
from .handshake import ErrorCode as ErrorCode
from .handshake import ErrorFrame as ErrorFrame
from .handshake import FrameError as FrameError
from .handshake import Hello as Hello
from .handshake import Scope as Scope
from .handshake import Welcome as Welcome
from .wirecode import carries_utf8

if TYPE_CHECKING:
    import cattrs

    from ..vocab.request import Request


# -- client -> daemon --------------------------------------------------------


@record
class Run:
    """Start a run with the user's `text`.

    Without `session` the daemon makes a new ``cli-`` session; with one, the
    run continues that session's conversation.
    """

    TYPE: ClassVar[str] = "run"
    text: str
    session: str | None = None
    #: The window's working directory (absolute): the run's tools work there, and so does
    #: a later resume of its task. Without it, the daemon's own folder.
    cwd: str | None = None


@record
class AnswerFrame:
    """Answer the question `ask` (the `AskFrame.id` this connection was sent).

    A question that no longer waits (answered already, withdrawn because its
    run stopped, expired) is refused with an ``error`` frame saying why; an
    unknown id, or one of another window, with ``not_found``.

    `value` is the choice or the typed text; `secret` carries masked input
    (a secret's value or the system password) and is never echoed or logged.
    `unanswerable` says that no answer will come from this window (the
    `agentrt` command's stdin closed): the run goes on as if nobody had been
    there to ask, saving the question with its task; `value` is then ignored.
    """

    TYPE: ClassVar[str] = "answer"
    ask: str
    value: str
    secret: str | None = attrs.field(default=None, repr=False)
    unanswerable: bool = False


#: The causes a client may give a `Cancel` (closing the connection is the disconnect).
CANCEL_CAUSES: Final = (Cause.USER_CANCEL, Cause.PAUSE)


def _check_cancel_cause(self: Cancel, _: attrs.Attribute[Cause], cause: Cause) -> None:
    if cause not in CANCEL_CAUSES:
        raise ValueError(
            f"a cancel's cause is 'user_cancel' or 'pause', not {cause.value!r}; "
            "close the connection to disconnect"
        )


@record
class Cancel:
    """Stop the run `task` this connection started, for `cause`.

    ``user_cancel`` (the default) deletes the run's pending task; ``pause``
    keeps it for a later resume. Older clients spell a pause ``"pause": true``
    (and a user-cancel ``"pause": false``): the converter's structure hook for
    this frame (`older_pause_hook`) reads that spelling into `cause`; it is
    never sent.
    """

    TYPE: ClassVar[str] = "cancel"
    task: str
    cause: Cause = attrs.field(default=Cause.USER_CANCEL, validator=_check_cancel_cause)


class PendingAction(enum.Enum):
    """What a client `PendingRequest` asks for."""

    #: List the pending ``cli-`` tasks this window may see.
    LIST = "list"
    #: Resume one session's pending task, streaming back to this window.
    RESUME = "resume"
    #: Throw one session's pending task away (a user-cancel).
    DISCARD = "discard"
    #: One session's pending task in full, transcript included.
    SHOW = "show"
    #: What resuming one session's pending task will do (a `PendingPreview`), and no more.
    PREVIEW = "preview"


#: Tasks in one ``pending`` list page when the request sets no limit, and the most it may ask.
LIST_PAGE = 200
LIST_PAGE_MAX = 1000


@record
class PendingRequest:
    """List, show, preview, resume or discard pending tasks.

    `session` names the task for ``show``, ``preview``, ``resume`` and ``discard``. On
    ``resume``, `answer` answers the saved question; without it the question
    is asked again inline (under the same id). `question_id` names the
    question `answer` is for (the listing's `PendingTask.question_id`, the
    ``ended`` frame's): if the task waits for another one now, or the named
    one was answered, withdrawn or expired, the resume is refused with an
    ``error`` frame saying why, and nothing changes. Without it the answer
    goes to the one question the task waits for. The resumed task works in the folder it recorded;
    one that recorded none is given `cwd` (absolute), else the daemon's own
    folder. ``list`` shows only sessions starting with `prefix`, most recently
    updated first, a page at a time: at most `limit` tasks (the daemon's page
    size when unset, at most `LIST_PAGE_MAX`) after `cursor`, the `next` of the
    page before. With `all_pages`, the page and every one after it come back,
    each its own reply, the last with no ``next``: the whole listing for one
    request. With `lines`, the pages are `PendingLines` (each task as
    ``agentrt pending list`` prints it) instead of `PendingList`.
    """

    TYPE: ClassVar[str] = "pending"
    action: PendingAction
    session: str | None = None
    answer: str | None = None
    prefix: str = ""
    cwd: str | None = None
    limit: int | None = None
    cursor: str | None = None
    all_pages: bool = False
    question_id: str | None = None
    lines: bool = False


class SessionsAction(enum.Enum):
    """What a client `SessionsRequest` asks for."""

    #: List the sessions this connection may see, most recently active first.
    LIST = "list"
    #: One session and a page of its stored messages.
    SHOW = "show"
    #: Delete a finished session and all its messages.
    RM = "rm"
    #: Put back the files the session's last run changed (or, with `turn`, every run's after
    #: that turn, the conversation rewound with them).
    UNDO = "undo"
    #: The session's turns, and how many files a rewind to each would put back.
    TURNS = "turns"
    #: Compact a finished session's conversation now: a summary stands for its older
    #: messages in what the model is given (acknowledged with the words of how many).
    COMPACT = "compact"


#: Messages in one ``session`` page when the request sets no limit, and the most it may ask.
MESSAGES_PAGE = 200
MESSAGES_PAGE_MAX = 1000


@record
class SessionsRequest:
    """List sessions (finished ones too), show one's messages, or remove one.

    ``list`` shows sessions starting with `prefix`, a page at a time: at most
    `limit` (default `LIST_PAGE`, at most `LIST_PAGE_MAX`) after `cursor`, the
    `next` of the page before, or with `all_pages` every page from there on,
    as `PendingRequest` lists them. ``show`` gives the `session` and its messages
    with a ``seq`` above `after`, at most `limit` (default `MESSAGES_PAGE`, at
    most `MESSAGES_PAGE_MAX`). ``rm`` deletes `session`; a session with a
    pending task is refused (discard the task first). To continue a session,
    send a `Run` naming it.
    """

    TYPE: ClassVar[str] = "sessions"
    action: SessionsAction
    session: str | None = None
    prefix: str = ""
    limit: int | None = None
    cursor: str | None = None
    after: int = -1
    all_pages: bool = False
    #: ``undo``: rewind to this turn (a user message's seq, as ``turns`` lists them).
    turn: int | None = None
    #: ``undo``: go on when files changed since the run, keeping their newer content beside.
    force: bool = False
    #: ``undo``: that task's changes only (a run stopped to be undone), waiting for its end.
    task: str | None = None
    #: ``undo``: touch nothing, say what would be put back (allowed while the session runs).
    dry_run: bool = False


class DaemonAction(enum.Enum):
    """What a client `DaemonRequest` asks of the daemon itself."""

    #: How the daemon is: its pid, socket, model, policy, HTTP address, connections, runs.
    STATUS = "status"
    #: Shut down as SIGTERM does: runs end with cause ``shutdown``, their tasks kept.
    STOP = "stop"


@record
class DaemonRequest:
    """Ask the daemon how it is (``status``) or to shut down (``stop``).

    Both are answered with a `DaemonStatus`; for ``stop`` it is the daemon as
    it starts to shut down (`DaemonStatus.runs` are the runs it stops), and the
    connection closes once it has. Only the `agentrt` command (scope ``all``)
    may stop the daemon; a window is refused.
    """

    TYPE: ClassVar[str] = "daemon"
    action: DaemonAction


class ModelsAction(enum.Enum):
    """What a client `ModelsRequest` asks for."""

    #: The configured models, and the one `session` runs with.
    LIST = "list"
    #: Switch `session` to `model` from its next run on.
    SET = "set"


@record
class ModelsRequest:
    """List the configured models, or switch a session to one of them.

    ``list`` gives every model the daemon's configuration offers (``model``
    and the ``models`` list), each saying whether it can be used now, and the
    one `session` runs with (the default without a session). ``set`` makes
    `model` the model of `session` from its next run (or resume) on, kept
    with the session; without a session a new one is made, which the next
    `Run` names to use it. Both are answered with a `ModelList`.
    """

    TYPE: ClassVar[str] = "models"
    action: ModelsAction
    session: str | None = None
    model: str | None = None


# -- daemon -> client --------------------------------------------------------


# The frames of a run's events are the events themselves (`agentrt.vocab.events`, declared
# once), each with its wire ``type``: the same fields, under the same names.


class TaskFrame(TaskStarted):
    """A run started (or resumed); `task_hash` is the hash a `Cancel` must name."""

    __slots__ = ()
    TYPE: ClassVar[str] = "task"


class TextFrame(TextEvent):
    """Streamed assistant text of run `task_hash`."""

    __slots__ = ()
    TYPE: ClassVar[str] = "text"


class ReasoningFrame(ReasoningEvent):
    """Streamed reasoning ("thinking") of run `task_hash`'s model, shown apart from its answer."""

    __slots__ = ()
    TYPE: ClassVar[str] = "reasoning"


class ToolCallFrame(ToolCallEvent):
    """A tool call of run `task_hash` is about to run."""

    __slots__ = ()
    TYPE: ClassVar[str] = "tool_call"


class ToolCallDeltaFrame(ToolCallDeltaEvent):
    """A piece of a tool call the model of run `task_hash` is still streaming.

    A `tool_call` frame follows when the call runs.
    """

    __slots__ = ()
    TYPE: ClassVar[str] = "tool_call_delta"


class ToolResultFrame(ToolResultEvent):
    """A tool call of run `task_hash` finished; `preview` is the start of its result."""

    __slots__ = ()
    TYPE: ClassVar[str] = "tool_result"


class ToolProgressFrame(ToolProgressEvent):
    """A tool call of run `task_hash` in flight says how far it has got."""

    __slots__ = ()
    TYPE: ClassVar[str] = "tool_progress"


class UsageFrame(UsageEvent):
    """Token usage of one model response of run `task_hash`."""

    __slots__ = ()
    TYPE: ClassVar[str] = "usage"


class CompactionFrame(CompactionEvent):
    """The conversation of run `task_hash` was compacted: a summary stands for earlier messages."""

    __slots__ = ()
    TYPE: ClassVar[str] = "compaction"


class VerifyFrame(VerifyEvent):
    """The result of checking the password typed for a restricted path."""

    __slots__ = ()
    TYPE: ClassVar[str] = "verify"


class EndedFrame(RunEnded):
    """The last frame of every run: how it ended and whether its pending task was kept."""

    __slots__ = ()
    TYPE: ClassVar[str] = "ended"


EventFrame = (
    TaskFrame
    | TextFrame
    | ReasoningFrame
    | ToolCallDeltaFrame
    | ToolCallFrame
    | ToolResultFrame
    | ToolProgressFrame
    | UsageFrame
    | CompactionFrame
    | VerifyFrame
    | EndedFrame
)
"""The frame of a run event."""

EVENT_FRAMES: Final[tuple[type[EventFrame], ...]] = get_args(EventFrame)
_FRAME_OF_EVENT: Final[Mapping[type, type[EventFrame]]] = {
    cls.__mro__[1]: cls for cls in EVENT_FRAMES
}


def frame_of(event: Event) -> EventFrame:
    """The frame that carries a run event: the same values under its frame class."""
    return _FRAME_OF_EVENT[type(event)](*attrs.astuple(event, recurse=False))


@record
class AskFrame:
    """A question for the human, from run `task`; reply with an `AnswerFrame` naming `id`.

    `kind` says which field to show: ``confirm`` (pick one of `choices`),
    ``question`` (free text), ``secret`` (masked text, sent as
    `AnswerFrame.secret`) or ``password`` (pick a choice and type the system
    password into a masked field). `error` explains why a question is asked
    again ("wrong password"). `diff` is the unified diff of the file change a
    confirmation is about (``write_file``, ``edit_file``), to show with it.
    """

    TYPE: ClassVar[str] = "ask"
    id: str
    task: str | None
    session: str
    # The fields of the question's `Request`, in its order:
    kind: RequestKind
    prompt: str
    choices: tuple[str, ...] = ()
    masked: bool = False
    tool: str | None = None
    error: str | None = None
    diff: str | None = None

    @classmethod
    def of(cls, id: str, task: str | None, session: str, request: Request) -> AskFrame:
        """The frame of question `id` of run `task` in `session`: `request`'s fields after these."""
        return cls(id, task, session, *attrs.astuple(request, recurse=False))

    @property
    def request(self) -> Request:
        """The question asked; masked exactly as its kind says (`Request.masked`)."""
        from ..vocab.request import Request  # a client that is only shown the frame never needs it

        return Request(
            self.kind, self.prompt, self.choices, tool=self.tool, error=self.error, diff=self.diff
        )


@record
class AskWithdrawn:
    """Question `id` no longer waits for an answer (its run stopped); close its prompt."""

    TYPE: ClassVar[str] = "ask_withdrawn"
    id: str
    reason: str


@record
class PendingTask:
    """One pending task as listed in a `PendingList` (not a frame of its own).

    `status` is ``unreadable`` for a stored task that cannot be decoded; its
    `error` says what is wrong, and it can still be discarded.
    """

    session: str
    status: str
    input: str
    updated_at: float
    cause: Cause | None = None
    question: str | None = None
    task: str | None = None
    #: The last failure (or what makes the record unreadable).
    error: str | None = None
    question_kind: RequestKind | None = None
    #: Messages in the task's transcript.
    messages: int = 0
    #: How many runs worked on it.
    runs: int = 0
    #: True when it is marked running but no run is working on it (its process died).
    crashed: bool = False
    #: The id of the saved question: a resume with an answer names it (`PendingRequest`).
    question_id: str | None = None


@record
class PendingList:
    """The reply to ``pending list``: the tasks this window may resume or discard."""

    TYPE: ClassVar[str] = "pending"
    tasks: tuple[PendingTask, ...] = ()
    #: The `cursor` of the next page; None on the last page.
    next: str | None = None


#: Where a `PendingLines` line's time goes (the client writes it in its own time zone).
LINE_TIME_MARK: Final = "\x1f"


@record
class PendingLines:
    """The reply to ``pending list`` asked with ``lines``: each task as a line of text.

    A line is what ``agentrt pending list`` prints of a task, with
    `LINE_TIME_MARK` in place of the local time of its last change; that
    time's second (since the epoch) is at the same place in `times`. The client
    puts the time in, so that it is shown in the client's time zone: at the
    line's first mark (none comes before it).
    """

    TYPE: ClassVar[str] = "pending_lines"
    lines: tuple[str, ...] = ()
    times: tuple[int, ...] = ()
    #: The `cursor` of the next page; None on the last page.
    next: str | None = None


@record
class PendingDetail:
    """The reply to ``pending show``: one pending task, its saved transcript, and what
    resuming it will do (None from a daemon that does not say)."""

    TYPE: ClassVar[str] = "pending_task"
    task: PendingTask
    transcript: tuple[dict[str, Any], ...] = ()
    preview: ResumePreview | None = None


@record
class PendingPreview:
    """The reply to ``pending preview``: what resuming the pending task of `session` will do.

    Small whatever the task's transcript: a window asks for it as its
    ``/pending`` list's selection moves.
    """

    TYPE: ClassVar[str] = "pending_preview"
    session: str
    preview: ResumePreview


@record
class SessionItem:
    """One session as listed in a `SessionList` (not a frame of its own)."""

    session: str
    #: Its first message's first line, shortened.
    title: str
    created_at: float
    #: When its last message was stored (seconds since the epoch).
    updated_at: float
    #: Messages stored: its finished conversation and its pending task's.
    messages: int
    #: Its pending task's status (``interrupted``, ...), or None when its runs all finished.
    status: str | None = None


@record
class SessionList:
    """The reply to ``sessions list``: the sessions this connection may see."""

    TYPE: ClassVar[str] = "sessions"
    sessions: tuple[SessionItem, ...] = ()
    #: The `cursor` of the next page; None on the last page.
    next: str | None = None


@record
class SessionMessage:
    """One stored message in a `SessionMessages` page (not a frame of its own)."""

    seq: int
    role: str
    content: str
    created_at: float
    #: An assistant message's tool calls: ``{"id", "name", "arguments"}`` each.
    tool_calls: tuple[dict[str, Any], ...] = ()
    #: A tool message's call, and the tool's name.
    tool_call_id: str | None = None
    name: str | None = None
    #: On a compaction entry (a ``note``): how many earlier messages its summary stands for.
    summarised: int = 0


@record
class SessionMessages:
    """The reply to ``sessions show``: the session and a page of its messages, oldest first."""

    TYPE: ClassVar[str] = "session"
    session: SessionItem
    messages: tuple[SessionMessage, ...] = ()
    #: The `after` of the next page (the last message's seq); None on the last page.
    next: int | None = None
    #: The tokens of each run of the session, with their cost when the model's price is known.
    usage: tuple[RunTokens, ...] = ()


@record
class ModelItem:
    """One configured model as listed in a `ModelList` (not a frame of its own)."""

    #: Its spec: ``scripted``, ``openai:NAME``, ``anthropic:NAME``, ...
    name: str
    #: Whether it is the configured default (``model``).
    default: bool = False
    #: Whether it can be used now; `why` says why not (no API key, ...).
    usable: bool = True
    why: str | None = None


@record
class ModelList:
    """The reply to ``models list`` and ``models set``: the models, and `session`'s own."""

    TYPE: ClassVar[str] = "models"
    models: tuple[ModelItem, ...] = ()
    #: The session asked about (made by a ``set`` without one), or None.
    session: str | None = None
    #: The model `session` runs with (the default for none).
    current: str = ""


@record
class TurnItem:
    """One turn of a session in a `TurnList` (not a frame of its own)."""

    #: The seq of the turn's user message (what ``sessions undo`` takes as `turn`).
    seq: int
    text: str
    #: How many files a rewind to this turn would put back.
    files: int


@record
class TurnList:
    """The reply to ``sessions turns``: the session's turns the model sees, oldest first."""

    TYPE: ClassVar[str] = "turns"
    session: str
    turns: tuple[TurnItem, ...] = ()


@record
class Undone:
    """The reply to ``sessions undo``: the files put back, or the conflicts that stopped it.

    With `done` false and `conflicts` set, nothing was touched: ask the person,
    then send the undo again with ``force``.
    """

    TYPE: ClassVar[str] = "undone"
    session: str
    done: bool
    restored: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    #: Where each conflicting file's newer content was kept (its path: the copy's).
    kept: dict[str, str] = attrs.field(factory=dict)
    #: The calls that could not be undone, and why.
    skipped: dict[str, str] = attrs.field(factory=dict)
    #: The answer to a ``dry_run``: `restored` lists what would be put back.
    dry_run: bool = False
    #: The task named in the request, if one was.
    task: str | None = None


@record
class Ack:
    """A request was carried out: `ref` is the type of the frame acknowledged.

    A ``cancel`` is acknowledged with its `task`; a ``pending discard`` and a
    ``sessions rm`` with their `session`.
    """

    TYPE: ClassVar[str] = "ack"
    ref: str
    detail: str
    task: str | None = None
    session: str | None = None


@record
class DaemonStatus:
    """The reply to a `DaemonRequest`: the daemon process and what it serves."""

    TYPE: ClassVar[str] = "daemon_status"
    pid: int
    socket: str
    daemon_version: str
    #: The model spec its runs use, and its approval policy.
    model: str
    approval: str
    #: Seconds since it started.
    uptime: float
    #: Open connections (this one included) and runs in flight.
    connections: int
    runs: int
    #: The HTTP API's address (``http://127.0.0.1:8765/``) when it serves one.
    http: str | None = None
    #: Why the HTTP API it was asked to serve is not served (a port in use).
    http_error: str | None = None
    #: True once it shuts down.
    stopping: bool = False


ClientFrame = (
    Hello
    | Run
    | AnswerFrame
    | Cancel
    | PendingRequest
    | SessionsRequest
    | DaemonRequest
    | ModelsRequest
)
"""A frame a client sends to the daemon."""

DaemonFrame = (
    Welcome
    | EventFrame
    | AskFrame
    | AskWithdrawn
    | PendingList
    | PendingLines
    | PendingDetail
    | PendingPreview
    | SessionList
    | SessionMessages
    | TurnList
    | Undone
    | DaemonStatus
    | ModelList
    | Ack
    | ErrorFrame
)
"""A frame the daemon sends to a client."""

Frame = ClientFrame | DaemonFrame
"""Any frame of either direction."""

CLIENT_FRAMES: Final[tuple[type[ClientFrame], ...]] = get_args(ClientFrame)
DAEMON_FRAMES: Final[tuple[type[DaemonFrame], ...]] = get_args(DaemonFrame)


# -- the converter --------------------------------------------------------------


def _strict(name: str, accept: Callable[[object], bool]) -> Callable[[object, object], object]:
    """A structure hook that passes a JSON value through only if `accept` says it fits."""

    def hook(value: object, _: object) -> object:
        if not accept(value):
            raise TypeError(f"expected {name}, got {type(value).__name__}")
        return value

    return hook


def _text(value: object, _: object) -> str:
    """Structure a string that UTF-8 can carry.

    JSON can escape half of a surrogate pair (``"\\ud800"``); such a string
    cannot be stored, logged or sent back, so it is refused here, at the edge,
    with an error naming the field instead of failing deep inside a run.
    """
    if not isinstance(value, str):
        raise TypeError(f"expected string, got {type(value).__name__}")
    if not carries_utf8(value):
        raise TypeError("expected string, got one with a lone surrogate escape")
    return value


def _format_error(exc: BaseException, kind: Any) -> str:
    # An optional field reports its union; name the non-null member instead.
    members = [arg for arg in get_args(kind) if arg is not type(None)]
    if len(members) == 1:
        kind = members[0]
    if isinstance(exc, KeyError):
        return "required field missing"
    from cattrs.errors import ForbiddenExtraKeysError

    if isinstance(exc, ForbiddenExtraKeysError):
        return f"unknown field {', '.join(sorted(exc.extra_fields))}"
    if isinstance(exc, ValueError | TypeError) and isinstance(kind, type):
        if issubclass(kind, enum.Enum):
            choices = ", ".join(repr(m.value) for m in kind)
            return f"expected one of {choices}"
        if str(exc).startswith("expected "):
            return str(exc)
        return f"expected {kind.__name__}"
    if isinstance(exc, TypeError) and str(exc).startswith("expected "):
        return str(exc)
    return f"invalid value ({exc})"


class _Cancelling(Protocol):
    """A cancel as some converter structures it: a `Cancel` frame, an HTTP cancel body."""

    @property
    def cause(self) -> Cause: ...


C = TypeVar("C", bound=_Cancelling)


def older_pause_hook(
    conv: cattrs.Converter, cls: type[C]
) -> Callable[[Mapping[str, Any], object], C]:
    """The structure hook of a cancel `cls`: the one place the older ``"pause"`` flag is read.

    ``"pause": true`` is a pause and ``false`` a user-cancel, into `cls`'s
    cause; true beside a ``cause`` other than ``pause`` is refused. The flag is
    never written: a cancel has only its cause.
    """
    from cattrs.errors import AttributeValidationNote
    from cattrs.errors import ClassValidationError

    plain = conv.gen_structure_attrs_fromdict(cls)
    where = f"While structuring {cls.__name__}"

    def hook(value: Mapping[str, Any], _: object) -> C:
        if "pause" not in value:
            return plain(value, cls)
        rest = dict(value)
        try:
            pause = conv.structure(rest.pop("pause"), bool)
        except TypeError as exc:
            exc.add_note(
                AttributeValidationNote(f"Structuring {cls.__name__} @ pause", "pause", bool)
            )
            raise ClassValidationError(where, [exc], cls) from None
        cancel = plain(rest, cls)
        if not pause or cancel.cause is Cause.PAUSE:
            return cancel
        if "cause" in rest:
            problem = ValueError("'pause' is true but 'cause' is not 'pause'; send only 'cause'")
            raise ClassValidationError(where, [problem], cls)
        return plain({**rest, "cause": Cause.PAUSE.value}, cls)

    return hook


@functools.cache
def converter() -> cattrs.Converter:
    """The one converter of the protocol, built on first use.

    Use `to_wire` / `from_wire` rather than calling it. Built lazily so that
    importing the protocol (a client, agenttui) costs no cattrs set-up until
    the first frame is encoded or decoded.
    """
    import cattrs
    from cattrs.strategies import configure_tagged_union

    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(str, _text)
    conv.register_structure_hook(bool, _strict("boolean", lambda v: isinstance(v, bool)))
    conv.register_structure_hook(
        int,
        _strict("int", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    )

    def _float(value: object, _: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"expected number, got {type(value).__name__}")
        return float(value)

    conv.register_structure_hook(float, _float)

    def _object(value: object, _: object) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise TypeError(f"expected object, got {type(value).__name__}")
        return value

    conv.register_structure_hook_func(lambda kind: kind == dict[str, Any], _object)

    # A JSON string is iterable; without this check "abc" would become ("a", "b", "c").
    def _is_tuple(kind: Any) -> bool:
        return getattr(kind, "__origin__", None) is tuple

    def _tuple_factory(kind: Any) -> Callable[[object, object], tuple[Any, ...]]:
        def hook(value: object, _: object) -> tuple[Any, ...]:
            if not isinstance(value, list):
                raise TypeError(f"expected list, got {type(value).__name__}")
            # cattrs (pinned) does the per-item work and records "[i]" in error paths.
            return conv._structure_tuple(value, kind)

        return hook

    conv.register_structure_hook_factory(_is_tuple, _tuple_factory)

    conv.register_structure_hook(Cancel, older_pause_hook(conv, Cancel))

    tag: Callable[[type], str] = lambda kind: kind.TYPE  # type: ignore[attr-defined]  # noqa: E731
    configure_tagged_union(ClientFrame, conv, tag_generator=tag, tag_name="type")
    configure_tagged_union(DaemonFrame, conv, tag_generator=tag, tag_name="type")
    return conv


_BY_TYPE: Final[Mapping[Any, Mapping[str, type]]] = {
    ClientFrame: {cls.TYPE: cls for cls in CLIENT_FRAMES},
    DaemonFrame: {cls.TYPE: cls for cls in DAEMON_FRAMES},
}


@functools.cache
def _encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    from .wirecode import compile_encoder

    return compile_encoder(cls, converter)


@functools.cache
def _decoder(cls: type) -> Callable[[dict[str, Any]], Any]:
    from .wirecode import compile_decoder

    return compile_decoder(cls, converter)


def to_wire(frame: Frame) -> dict[str, Any]:
    """The JSON object of a frame, with its ``type`` field first.

    The converter defines it; a function compiled per frame class
    (`agentrt.protocol.wirecode`) gives the same object in a fraction of the time.
    """
    cls: type = type(frame)
    return _encoder(cls)(frame)


def to_wire_slow(frame: Frame) -> dict[str, Any]:
    """`to_wire` by the converter alone (what the compiled function must equal)."""
    data: dict[str, Any] = {"type": frame.TYPE}
    data.update(converter().unstructure(frame))
    return data


def from_wire(data: object, union: Any) -> Any:
    """Structure a decoded JSON value as one frame of `union` (`ClientFrame` or `DaemonFrame`).

    Raises `FrameError` naming the problem: ``unknown frame type 'x'; expected
    one of ...`` or ``expected int @ $.attempts_left``.
    """
    by_type = _BY_TYPE[union]
    if not isinstance(data, dict):
        raise FrameError(
            ErrorCode.MALFORMED,
            f'a frame must be a JSON object with a "type" field, got {_json_kind(data)}',
        )
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in by_type:
        expected = ", ".join(sorted(by_type))
        what = 'missing "type" field' if kind is None else f"unknown frame type {kind!r}"
        raise FrameError(ErrorCode.UNKNOWN_TYPE, f"{what}; expected one of: {expected}")
    cls: type = by_type[kind]
    if cls in EVENT_FRAMES:
        data = _with_event_names(data)
    frame = _decoder(cls)(data)
    if frame is not None:
        return frame
    return from_wire_slow(data, union)


#: A run event frame's fields as protocol version 1 first spelled them: still read (from
#: an older daemon), never sent.
_OLD_EVENT_NAMES: Final = {"task": "task_hash", "session": "session_id"}


def _with_event_names(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with an event frame's old field names (``task``, ``session``) read as today's."""
    if not any(old in data for old in _OLD_EVENT_NAMES):
        return data
    return {
        new if (new := _OLD_EVENT_NAMES.get(key)) is not None and new not in data else key: value
        for key, value in data.items()
    }


def from_wire_slow(data: dict[str, Any], union: Any) -> Any:
    """`from_wire` by the converter alone, for an object whose ``type`` is one of `union`'s.

    It decides every object the compiled decoder leaves to it, and words the errors.
    """
    kind = data["type"]
    conv = converter()
    from cattrs import BaseValidationError  # loaded by converter()
    from cattrs import transform_error  # loaded by converter()

    try:
        return conv.structure(data, union)
    except (BaseValidationError, ValueError, TypeError, KeyError) as exc:
        problems = transform_error(exc, path="$", format_exception=_format_error)
        raise FrameError(
            ErrorCode.INVALID, f"invalid {kind!r} frame: " + "; ".join(problems), ref=kind
        ) from None


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"

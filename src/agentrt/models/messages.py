"""The conversation: messages, tool calls, and what a model streams."""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any
from typing import Protocol
from typing import overload

import attrs

from ..vocab.reprs import quick_init
from ..vocab.reprs import record
from ..vocab.stops import CallState


class Role(enum.Enum):
    """Who said a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    #: agentrt speaking to the model about the conversation itself (what a stop did): each
    #: provider places it where it takes such a note (see `agentrt.store.ledger`).
    NOTE = "note"


class Redaction(enum.Enum):
    """What was done to a saved tool call's arguments to keep secret values out of the store."""

    #: Nothing: the arguments are as the model gave them.
    NONE = "none"
    #: Whole secret values were replaced, and each ``[secret NAME]`` in the arguments
    #: stands for the value of that secret: a resumed call runs with them put back.
    NAMED = "named"
    #: A value was replaced in another spelling (encoded, wrapped), or beside a label
    #: the model wrote itself: the original cannot be put back, so the call is not resumed.
    LOST = "lost"


@record
class ToolCall:
    """One call the model asked for. `arguments` is a JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    #: Set on a call as saved (see `Redaction`); a live call is always `Redaction.NONE`.
    redaction: Redaction = Redaction.NONE


@record
class ThinkingBlock:
    """A model's signed reasoning, kept in the transcript to be sent back as it came.

    Anthropic's extended thinking returns ``thinking`` blocks whose `signature`
    the API checks when the block is sent back (which it requires during a
    round of tool calls), and ``redacted_thinking`` blocks whose encrypted
    `redacted` data only the API can read. A block whose text had to be
    changed (a secret scrubbed out) loses its signature: it can no longer be
    sent back, and the provider leaves it out.
    """

    text: str = ""
    signature: str | None = None
    #: The encrypted data of a ``redacted_thinking`` block (its text is then empty).
    redacted: str | None = None

    @property
    def sendable(self) -> bool:
        """Whether the API will take this block back (signed, or redacted by the API itself)."""
        return bool(self.signature) or bool(self.redacted)

    def scrubbed(self, scrub: Callable[[str], str]) -> ThinkingBlock:
        """This block with `scrub` applied to its text; unsigned if that changed anything."""
        text = scrub(self.text)
        if text == self.text:
            return self
        return attrs.evolve(self, text=text, signature=None)


@record
class Compaction:
    """What a compaction entry (a `Role.NOTE` message holding a summary) stands for.

    The model is given the summary in the place of the `summarised` messages
    before the entry, except the `kept` ones just before it, which it still
    gets whole (see `agentrt.agent.compaction`). The store keeps them all.
    """

    summarised: int
    kept: int = 0


@record
class Message:
    """One message of a transcript."""

    role: Role
    content: str = ""
    #: The calls an assistant message asks for.
    tool_calls: tuple[ToolCall, ...] = ()
    #: On a tool message: the call it answers.
    tool_call_id: str | None = None
    #: On a tool message: the tool's name.
    name: str | None = None
    #: On an assistant message: the model's signed reasoning, sent back on later turns.
    thinking: tuple[ThinkingBlock, ...] = ()
    #: On a tool message whose call did not run as asked: denied, refused, or (a result
    #: written for it by agentrt) stopped, not started, may have run. None: it ran.
    call_state: CallState | None = None
    #: On a note that rewinds the conversation (`/rewind`): the index, among the session's
    #: messages, of the first one the model no longer sees; those from there to the note are
    #: left out of what it is sent (`model_view`), and kept in the record.
    rewinds: int | None = None
    #: On a note that summarises earlier messages: what it stands for.
    compaction: Compaction | None = None

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message."""
        return cls(Role.USER, text)

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message."""
        return cls(Role.SYSTEM, text)

    @classmethod
    def assistant(cls, text: str, tool_calls: Sequence[ToolCall] = ()) -> Message:
        """An assistant message, with the tool calls it asks for."""
        return cls(Role.ASSISTANT, text, tuple(tool_calls))

    @classmethod
    def tool_result(cls, call: ToolCall, content: str, state: CallState | None = None) -> Message:
        """The result of `call`; `state` when the call did not run as asked (`call_state`)."""
        return cls(Role.TOOL, content, tool_call_id=call.id, name=call.name, call_state=state)

    @classmethod
    def note(cls, text: str) -> Message:
        """A note from agentrt to the model about the conversation itself (`Role.NOTE`)."""
        return cls(Role.NOTE, text)


class StoredMessages(Sequence[Message]):
    """Messages as a store read them: each made a `Message` when first read, from the JSON
    value of its stored body (`make`, given its index among the values, raises for one
    that holds no message).

    With `texts`, the values are the bodies themselves, JSON texts the store checked, and
    `texts` holds the indices of those that are not plainly objects (that do not begin
    with ``{``, or hold a ``\\u`` escape that could spell a key): `make` is given the text,
    and none is parsed until its message is read, or `has` cannot tell from its text alone.

    A session's history of thousands of messages is read whole only by what needs it
    whole (a provider's request); a run that reads its end reads only that. Slices share
    the values (and what was made of them); the fields `has` asks about are read from
    the values themselves, whether made or not.
    """

    __slots__ = ("_make", "_odd", "_start", "_stop", "_values")

    def __init__(
        self,
        values: list[Any],
        make: Callable[[int, Any], Message],
        start: int = 0,
        stop: int | None = None,
        *,
        texts: AbstractSet[int] | None = None,
    ) -> None:
        self._values = values
        self._make = make
        self._start = start
        self._stop = len(values) if stop is None else stop
        self._odd = texts

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            stop = max(start, stop)
            return StoredMessages(
                self._values,
                self._make,
                self._start + start,
                self._start + stop,
                texts=self._odd,
            )
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        at = self._start + index
        value = self._values[at]
        if type(value) is not Message:
            value = self._values[at] = self._make(at, value)
        return value

    def __iter__(self) -> Iterator[Message]:
        return (self[i] for i in range(len(self)))

    def __reversed__(self) -> Iterator[Message]:
        return (self[i] for i in range(len(self) - 1, -1, -1))

    def __add__(self, more: Sequence[Message]) -> StoredMessages:
        """These messages, then `more`: the values copied (made ones stay made)."""
        start, stop = self._start, self._stop
        odd = self._odd
        if odd is not None and (start or stop < len(self._values)):
            odd = {i - start for i in odd if start <= i < stop}
        return StoredMessages([*self._values[start:stop], *more], self._make, texts=odd)

    def has(self, field: str) -> list[int]:
        """The indices of the messages whose `field` (``rewinds``, ``compaction``) is set.

        A text is parsed only when it may hold the field: one of an object with no
        ``"field"`` in it has none.
        """
        start, stop = self._start, self._stop
        values = self._values[start:stop]
        maybe: Iterable[int]
        if self._odd is None:
            maybe = range(len(values))
        else:
            key = f'"{field}"'
            maybe = [i for i, value in enumerate(values) if type(value) is not str or key in value]
            odd = [i - start for i in self._odd if start <= i < stop]
            if odd:
                maybe = sorted({*maybe, *odd})
        found = []
        for index in maybe:
            value = values[index]
            if type(value) is Message:
                if getattr(value, field) is not None:
                    found.append(index)
                continue
            if self._odd is not None:
                try:
                    value = json.loads(value)
                except ValueError:
                    found.append(index)  # made, it says what is wrong with it
                    continue
            if type(value) is not dict or value.get(field) is not None:
                found.append(index)  # not plainly a message: made, it says what it is
        return found


def model_view(messages: Sequence[Message]) -> Sequence[Message]:
    """`messages` less those a rewind note (`Message.rewinds`) after them left out.

    Stored messages none of which rewinds come back as they are: none is made to ask.
    """
    if isinstance(messages, StoredMessages):
        if not messages.has("rewinds"):
            return messages
    elif not any(m.rewinds is not None for m in messages):
        return list(messages)
    return [messages[i] for i in seen_indices(messages)]


def seen_indices(messages: Sequence[Message]) -> list[int]:
    """The indices of the `messages` the model sees (see `model_view`)."""
    dropped = [False] * len(messages)
    for index, message in enumerate(messages):
        if message.rewinds is not None:
            for gone in range(max(message.rewinds, 0), index):
                dropped[gone] = True
    return [i for i, gone in enumerate(dropped) if not gone]


@record
class ToolSpec:
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@record
class Usage:
    """Token counts reported by a model for one response.

    `input_tokens` counts every prompt token the model read, cached or not;
    `cache_read_tokens` of them came from the provider's prompt cache and
    `cache_creation_tokens` were written to it (both 0 when not reported).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    #: Of `output_tokens`, those the model spent reasoning (OpenAI's ``reasoning_tokens``;
    #: 0 when the provider does not say, as Anthropic's counts thinking as output only).
    reasoning_tokens: int = 0


@quick_init
@record
class TextDelta:
    """A piece of streamed assistant text."""

    text: str


@quick_init
@record
class ToolCallDelta:
    """A piece of a streamed tool call: its name when first seen, then argument JSON text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@quick_init
@record
class ReasoningDelta:
    """A piece of the model's streamed reasoning ("thinking"), shown apart from its answer."""

    text: str


ModelDelta = TextDelta | ToolCallDelta | ReasoningDelta


@record
class ModelResponse:
    """A whole model response: its text, its tool calls, its usage."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    #: Signed reasoning the provider needs back on the next turn (see `ThinkingBlock`).
    thinking: tuple[ThinkingBlock, ...] = ()

    def as_message(self) -> Message:
        """The assistant message this response becomes in the transcript."""
        return Message(Role.ASSISTANT, self.text, self.tool_calls, thinking=self.thinking)


OnDelta = Callable[[ModelDelta], Awaitable[None]]


class Model(Protocol):
    """A language model that streams.

    `complete` streams deltas through `on_delta` as they arrive and returns
    the whole response. It must be cancellable at any checkpoint: a provider
    that holds a network stream closes it when cancelled.

    A run's `messages` start with its system prompt, one `Role.SYSTEM` message
    (`agentrt.agent.prompt`), the same at every request of the run; no other
    system message follows it, and no transcript or store keeps it. A provider
    sends it where its API takes instructions; a model may ignore it.
    """

    @property
    def name(self) -> str:
        """A label such as ``"scripted"`` or ``"openai:gpt-4o-mini"``."""
        ...

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_delta: OnDelta,
    ) -> ModelResponse:
        """Stream one response to `messages`, offering `tools`."""
        ...


class ModelError(Exception):
    """A model could not answer (network, auth, unknown model, rate limit, bad reply).

    The message is meant for the user and never contains credentials.
    """

"""Context windows and the compaction of a long conversation.

Every model reads at most its context window of tokens. Before a round's
request would pass a share of it (`ContextLimits.share`, 85 % unless
configured), the older turns are *compacted*: a summary (written by the model;
a deterministic trim for the scripted and replay models) takes their place in
the prompt. The store keeps every message: the summary is one more entry of
the conversation, a `Role.NOTE` message with a `Compaction` saying how many
earlier messages it stands for and how many of the ones just before it the
prompt still holds whole (`prompt_of`).
"""

from __future__ import annotations

import itertools
import json
import math
import operator
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import overload

import attrs

from ..models.messages import Compaction
from ..models.messages import Message
from ..models.messages import Model
from ..models.messages import ModelDelta
from ..models.messages import Role
from ..models.messages import StoredMessages
from ..models.messages import ToolSpec
from ..models.messages import Usage
from ..vocab.reprs import record

#: The share of the window a request may fill before the conversation is compacted.
DEFAULT_SHARE = 0.85
#: The share of the window the messages kept whole after a compaction may take at most.
KEEP_SHARE = 0.25
#: Characters a token stands for in the estimate: fewer than the ~4 of English text in
#: the providers' tokenizers, so that the estimate errs on the large side.
CHARS_PER_TOKEN = 3
#: Tokens a message costs beyond its text (its role, the JSON around it).
MESSAGE_OVERHEAD = 8

#: Context windows (tokens) of the common model families, by the start of the model's
#: name after its provider, most exact first (as the providers' model pages gave them in
#: June 2025). ``context_windows`` in config.toml overrides them, or names any other model.
DEFAULT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("openai:gpt-4.1", 1_047_576),
    ("openai:gpt-4o", 128_000),
    ("openai:gpt-4-turbo", 128_000),
    ("openai:gpt-4", 8_192),
    ("openai:gpt-3.5-turbo", 16_385),
    ("openai:gpt-5", 400_000),
    ("openai:o1", 200_000),
    ("openai:o3", 200_000),
    ("openai:o4", 200_000),
    ("anthropic:claude", 200_000),
)


@record
class ContextLimits:
    """The context window of each model, and the share of it a request may fill."""

    #: Windows by model spec (``"openai:gpt-4o"``), over `DEFAULT_WINDOWS`.
    windows: Mapping[str, int] = attrs.field(factory=dict)
    share: float = DEFAULT_SHARE

    def window_of(self, model: str) -> int | None:
        """The context window of the model named `model` (its spec); None when not known."""
        if model in self.windows:
            return self.windows[model]
        for prefix, tokens in DEFAULT_WINDOWS:
            if model.startswith(prefix):
                return tokens
        return None

    def budget_of(self, model: str) -> int | None:
        """The tokens a request to `model` may hold before the conversation is compacted."""
        window = self.window_of(model)
        return None if window is None else int(window * self.share)


def message_tokens(message: Message) -> int:
    """An estimate, on the large side, of the tokens `message` takes in a request."""
    chars = len(message.content)
    for call in message.tool_calls:
        chars += len(call.id) + len(call.name) + len(json.dumps(call.arguments))
    for block in message.thinking:
        chars += len(block.text) + len(block.signature or "") + len(block.redacted or "")
    return MESSAGE_OVERHEAD + math.ceil(chars / CHARS_PER_TOKEN)


def tools_tokens(tools: Sequence[ToolSpec]) -> int:
    """An estimate of the tokens the tools offered take in a request."""
    chars = sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)
    return math.ceil(chars / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD * len(tools)


def estimate(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
    """An estimate, on the large side, of the tokens of a request of `messages` and `tools`."""
    return sum(message_tokens(m) for m in messages) + tools_tokens(tools)


def last_compaction(conversation: Sequence[Message]) -> int:
    """The index of the last compaction entry of `conversation`, or -1.

    Stored messages (`StoredMessages`) say which of them are entries without being made
    into messages, so a long history a run only adds to is not read to learn it has none.
    """
    if isinstance(conversation, Joined):
        later = last_compaction(conversation.second)
        if later >= 0:
            return len(conversation.first) + later
        return last_compaction(conversation.first)
    if isinstance(conversation, StoredMessages):
        found = conversation.has("compaction")
        # A value that is not plainly a message is among them: made, it says what it is.
        while found and conversation[found[-1]].compaction is None:
            found.pop()
        return found[-1] if found else -1
    index = len(conversation)
    for message in reversed(conversation):  # a `Joined` reads its parts, not each index
        index -= 1
        if message.compaction is not None:
            return index
    return -1


class Joined(Sequence[Message]):
    """Two message sequences read as one (a session's history, then a run's transcript),
    without copying either: a prompt is built from its end, in time of its own size."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Sequence[Message], second: Sequence[Message]) -> None:
        self._first = first
        self._second = second

    @property
    def first(self) -> Sequence[Message]:
        return self._first

    @property
    def second(self) -> Sequence[Message]:
        return self._second

    def __len__(self) -> int:
        return len(self._first) + len(self._second)

    # Reading it whole (a prompt without a compaction is the whole conversation) goes
    # through the parts' own iterators, not an index at a time through `__getitem__`.
    def __iter__(self) -> Iterator[Message]:
        return itertools.chain(self._first, self._second)

    def __reversed__(self) -> Iterator[Message]:
        return itertools.chain(reversed(self._second), reversed(self._first))

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        split = len(self._first)
        return self._first[index] if index < split else self._second[index - split]


_role = operator.attrgetter("role")


def prompt_of(conversation: Sequence[Message]) -> Sequence[Message]:
    """What the model is given of `conversation`: its last compaction's summary, the
    messages that compaction kept whole, then every message after it (and, when none of
    these is the user's, the user's latest message before them, whole).

    Read from the end: its time grows with the prompt, not with the conversation. A
    conversation with no compaction is the prompt whole: a `Joined` one (a run's) as it
    is, uncopied, so a model that reads its end reads only that. Otherwise it reads
    through the conversation's iterators (backwards from the end, forwards for a
    leading system prompt), not an index at a time: a `Joined` conversation answers
    an index through each of its parts' lengths.
    """
    if last_compaction(conversation) < 0:
        return conversation if isinstance(conversation, Joined) else list(conversation)
    backwards = reversed(conversation)
    after: list[Message] = []  # gathered newest first
    entry: Message | None = None
    for message in backwards:
        if message.compaction is not None:
            entry = message
            break
        after.append(message)
    after.reverse()
    assert entry is not None and entry.compaction is not None
    kept: list[Message] = []  # gathered newest first
    if entry.compaction.kept > 0:
        for message in backwards:
            if message.role is not Role.SYSTEM:
                kept.append(message)
                if len(kept) == entry.compaction.kept:
                    break
    kept.reverse()
    rest = [*kept, *after]
    if Role.USER not in map(_role, rest):
        # The user's latest message was summarised with the rest (it did not fit in the
        # part kept whole): it is what the model is working on, so it goes along whole too.
        for message in backwards:
            if message.role is Role.USER:
                rest.insert(0, message)
                break
    at = len(conversation) - len(after) - 1
    system: list[Message] = []
    for message in itertools.islice(conversation, at):  # a system prompt leads, if any
        if message.role is not Role.SYSTEM:
            break
        system.append(message)
    return [*system, Message.note(entry.content), *rest]


@record
class Plan:
    """A compaction to make: the messages the summary replaces, and those kept whole."""

    #: The summary so far (the last compaction's), if any.
    earlier: str
    #: The messages the new summary covers, after the summary so far.
    covered: tuple[Message, ...]
    #: How many messages of the conversation the new summary stands for in all.
    summarised: int
    #: How many messages before the new entry stay whole in the prompt.
    kept: int


def plan(conversation: Sequence[Message], keep_tokens: int) -> Plan | None:
    """What compacting `conversation` now would summarise, keeping whole at most
    `keep_tokens` of its newest messages (never from a tool's result on: a kept part
    starts with a user's or the model's message), and always the latest of these and what
    follows it. None when there is nothing to summarise."""
    at = last_compaction(conversation)
    earlier = ""
    if at >= 0:
        entry = conversation[at]
        assert entry.compaction is not None
        earlier = entry.content
        others = [m for m in conversation[:at] if m.role is not Role.SYSTEM]
        whole = others[len(others) - entry.compaction.kept :] if entry.compaction.kept else []
        candidates = [*whole, *conversation[at + 1 :]]
    else:
        candidates = list(conversation)
    candidates = [m for m in candidates if m.role is not Role.SYSTEM]
    cut = len(candidates)
    used = 0
    best = len(candidates)
    while cut > 0:
        used += message_tokens(candidates[cut - 1])
        if used > keep_tokens:
            break
        cut -= 1
        if candidates[cut].role in (Role.USER, Role.ASSISTANT):
            best = cut
    # The model's latest message (with its calls' results after it), or the user's if the
    # model has not answered it yet, always stays whole: it is where the work stands.
    latest = max(
        (i for i, m in enumerate(candidates) if m.role in (Role.USER, Role.ASSISTANT)), default=0
    )
    best = min(best, latest)
    covered = tuple(candidates[:best])
    if not covered:
        return None
    total = sum(1 for m in conversation if m.compaction is None and m.role is not Role.SYSTEM)
    kept = len(candidates) - best
    return Plan(earlier, covered, total - kept, kept)


def entry_of(plan: Plan, summary: str) -> Message:
    """The compaction entry that puts `summary` in the place of what `plan` covers."""
    text = (
        f"agentrt: the {plan.summarised} earlier messages of this conversation were "
        f"summarised to fit the model's context window. The summary:\n\n{summary.strip()}"
    )
    return Message(Role.NOTE, text, compaction=Compaction(plan.summarised, plan.kept))


def transcript_text(plan: Plan, budget_chars: int) -> str:
    """What `plan` covers as plain text, for the model to summarise: the summary so far,
    then the newest messages that fit in `budget_chars` (it says how many did not)."""
    lines: list[str] = []
    used = len(plan.earlier)
    for message in reversed(plan.covered):
        line = _line(message)
        if used + len(line) > budget_chars:
            break
        lines.append(line)
        used += len(line)
    left_out = len(plan.covered) - len(lines)
    head = [f"The summary so far:\n{plan.earlier}"] if plan.earlier else []
    if left_out:
        head.append(f"({left_out} older messages do not fit here and are left out.)")
    return "\n\n".join([*head, *reversed(lines)])


def _line(message: Message) -> str:
    who = message.role.value
    if message.role is Role.TOOL:
        who = f"tool {message.name or ''}".strip()
    text = message.content
    for call in message.tool_calls:
        text += f"\n(calls {call.name} {json.dumps(call.arguments)})"
    return f"[{who}] {text}"


SUMMARY_REQUEST = (
    "Summarise the conversation below for yourself: it is about to leave your context "
    "window, and this summary will stand in for it. Keep what the user asked for, what "
    "was decided and done (files, commands, results), what is still open, and any fact "
    "you will need; leave out chatter. Write only the summary.\n\n"
)


def trim_summary(plan: Plan) -> str:
    """A summary written without a model (the scripted and replay models): the first
    and the last user's message it covers, cut short, and how many there were."""
    users = [m.content for m in plan.covered if m.role is Role.USER]
    parts = [f"{len(plan.covered)} messages were trimmed from the prompt."]
    if plan.earlier:
        parts.append("An earlier summary was trimmed with them.")
    if users:
        parts.append(f"The first user message among them: {_short(users[0])!r}.")
        if len(users) > 1:
            parts.append(f"The last: {_short(users[-1])!r}.")
    return " ".join(parts)


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


async def compaction_of(
    model: Model,
    limits: ContextLimits,
    conversation: Sequence[Message],
    tools: Sequence[ToolSpec],
    *,
    force: bool = False,
    spent: list[Usage] | None = None,
) -> Message | None:
    """The compaction entry for `conversation` if a request of it to `model` would pass the
    share of its window (or, with `force`, anyway); None when none is due or nothing can go.
    The tokens of the summary's request, if the model wrote one, are added to `spent`."""
    budget = limits.budget_of(model.name)
    if not force and (budget is None or estimate(prompt_of(conversation), tools) <= budget):
        return None
    window = limits.window_of(model.name)
    # Asked for by hand, it summarises everything: what is left is as small as it gets.
    keep = 0 if force or window is None else int(window * KEEP_SHARE)
    found = plan(conversation, keep)
    if found is None:
        return None
    entry = entry_of(found, await write_summary(model, found, budget, spent))
    if not force and estimate(prompt_of([*conversation, entry]), tools) >= estimate(
        prompt_of(conversation), tools
    ):
        return None  # the summary would take more room than what it stands for
    return entry


async def write_summary(
    model: Model, found: Plan, budget: int | None, spent: list[Usage] | None = None
) -> str:
    """The summary of what `found` covers: written by `model`, or a trim for a model that
    only replays (the scripted and replay models)."""
    name = model.name
    if name == "scripted" or name.startswith("replay:"):
        return trim_summary(found)
    room = (budget or 32_000) - 2 * MESSAGE_OVERHEAD - len(SUMMARY_REQUEST) // CHARS_PER_TOKEN
    text = SUMMARY_REQUEST + transcript_text(found, max(room, 1000) * CHARS_PER_TOKEN // 2)

    async def quiet(delta: ModelDelta) -> None:
        pass  # the summary is not a reply: nothing of it is shown as one

    response = await model.complete([Message.user(text)], (), quiet)
    if spent is not None and response.usage is not None:
        spent.append(response.usage)
    return response.text or trim_summary(found)

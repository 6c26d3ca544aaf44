"""The embedded default model: deterministic, offline, driven by a tiny grammar.

The last user message is split on top-level ``;`` into statements; each tool
statement becomes one tool call, and all the calls of a message run in
parallel in one round. After the round, the model answers with a summary of
the results. Grammar:

=======================  ==========================================================
``ask QUESTION``         ask the human (``ask_user``)
``write PATH TEXT``      write a file (needs a confirmation)
``sh COMMAND``           run a shell command (needs a confirmation)
``read PATH``            read a file
``read PATH N [M]``      read M lines (default: up to the bound) from line N on
``edit PATH OLD NEW``    replace OLD by NEW in a file (needs a confirmation, showing the
                         diff); quote a piece with spaces in it (shell-style), and end
                         with ``all`` to replace every occurrence
``ls [DIR]``             list a folder (``list_dir``)
``glob PATTERN [DIR]``   find files by a gitignore-style pattern
``grep PATTERN [PATH]``  search file contents for a regular expression
``secret NAME``          ask for a secret and store it (``store_secret``)
``sleep SECONDS``        a tool that sleeps (a long-running tool to cancel)
``stream N``             stream N words slowly (a long reply to interrupt)
``spawn {STATEMENTS}``   run STATEMENTS in an in-process subagent
``big N``                a tool whose result is N bytes (to see snapshot clamping)
``fail MESSAGE``         the model fails with MESSAGE (a run that fails at once)
anything else            echoed back as streamed text
=======================  ==========================================================

`ReplayModel` instead plays a conversation recorded in a JSON file, one
model turn per response.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from ..vocab.locations import StrPath
from ..vocab.reprs import record
from .messages import Message
from .messages import ModelError
from .messages import ModelResponse
from .messages import OnDelta
from .messages import Role
from .messages import TextDelta
from .messages import ToolCall
from .messages import ToolSpec
from .messages import Usage


def split_statements(text: str) -> list[str]:
    """Split `text` on ``;`` outside braces, dropping empty statements."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(depth - 1, 0)
        if ch == ";" and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _unbrace(text: str) -> str:
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        return text[1:-1].strip()
    return text


class _ParseError(Exception):
    pass


def parse_statement(statement: str) -> tuple[str, dict[str, Any]] | str:
    """One statement as a tool call (name, arguments), or the text to echo."""
    verb, _, rest = statement.partition(" ")
    rest = rest.strip()
    try:
        if verb == "ask" and rest:
            return "ask_user", {"question": rest}
        if verb == "write":
            path, _, content = rest.partition(" ")
            if not path:
                raise _ParseError("write needs a path: write PATH TEXT")
            return "write_file", {"path": path, "content": content}
        if verb == "sh" and rest:
            return "shell", {"command": rest}
        if verb == "read" and rest:
            return "read_file", _read(rest)
        if verb == "edit":
            return "edit_file", _edit(rest)
        if verb == "ls":
            return "list_dir", {"path": rest or "."}
        if verb in ("glob", "grep") and rest:
            words = _words(rest, f"{verb} PATTERN [PATH]")
            if len(words) > 2:
                raise _ParseError(f"{verb} takes a pattern and a path: quote a pattern with spaces")
            return verb, {"pattern": words[0], **({"path": words[1]} if len(words) > 1 else {})}
        if verb == "secret" and rest:
            return "store_secret", {"name": rest}
        if verb == "sleep":
            return "sleep", {"seconds": _number(rest, "sleep SECONDS")}
        if verb == "big":
            return "big", {"size": int(_number(rest, "big N"))}
        if verb == "spawn" and rest:
            return "spawn", {"task": _unbrace(rest)}
    except _ParseError as exc:
        return f"(scripted model: {exc})"
    return statement


def _words(text: str, usage: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise _ParseError(f"{usage}: {exc}") from None


def _read(rest: str) -> dict[str, Any]:
    """``read PATH [OFFSET [LIMIT]]``: the numbers at the end, if any; the path is the rest."""
    words = rest.split(" ")
    numbers: list[int] = []
    while len(words) > 1 and len(numbers) < 2 and words[-1].isdigit():
        numbers.insert(0, int(words.pop()))
    arguments: dict[str, Any] = {"path": " ".join(words)}
    for name, value in zip(("offset", "limit"), numbers, strict=False):
        arguments[name] = value
    return arguments


def _edit(rest: str) -> dict[str, Any]:
    usage = "edit PATH OLD NEW [all]"
    words = _words(rest, usage)
    if len(words) == 4 and words[3] == "all":
        return {
            "path": words[0],
            "old_string": words[1],
            "new_string": words[2],
            "replace_all": True,
        }
    if len(words) != 3:
        raise _ParseError(f"edit needs a path, the old text and the new: {usage}")
    return {"path": words[0], "old_string": words[1], "new_string": words[2]}


def _number(text: str, usage: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _ParseError(f"expected a number in {usage!r}, got {text!r}") from None
    if not 0 <= value <= 1e9:
        raise _ParseError(f"{usage}: the number must be between 0 and 1e9")
    return value


@record
class ScriptedModel:
    """The deterministic default model (see the module docstring for its grammar).

    `word_delay` paces echoed text and `stream_delay` the words of ``stream N``;
    both go through `trio.sleep`, so tests run them on a `MockClock`.
    """

    word_delay: float = 0.02
    stream_delay: float = 0.1

    @property
    def name(self) -> str:
        """``"scripted"``."""
        return "scripted"

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], on_delta: OnDelta
    ) -> ModelResponse:
        """Answer the last user message, or summarise the tool results that follow it."""
        # From the end: a long history before the last user message is never walked.
        last_user = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].role is Role.USER), None
        )
        if last_user is None:
            raise ModelError("the scripted model needs a user message")
        after = messages[last_user + 1 :]
        if any(m.role is Role.ASSISTANT for m in after):
            return await self._summarise(after, on_delta)
        return await self._plan(messages[last_user].content, len(messages), on_delta)

    async def _plan(self, text: str, position: int, on_delta: OnDelta) -> ModelResponse:
        spoken: list[str] = []
        calls: list[ToolCall] = []
        for statement in split_statements(text):
            verb, _, rest = statement.partition(" ")
            if verb == "fail":
                # After what earlier statements said: "hi; fail" fails mid-reply.
                raise ModelError(rest.strip() or "the scripted model was told to fail")
            if verb == "stream":
                try:
                    count = int(_number(rest.strip(), "stream N"))
                except _ParseError as exc:
                    spoken.append(
                        await self._say(f"(scripted model: {exc})", on_delta, after=bool(spoken))
                    )
                    continue
                words = [f"word{i + 1}" for i in range(count)]
                spoken.append(
                    await self._say(
                        " ".join(words), on_delta, self.stream_delay, after=bool(spoken)
                    )
                )
                continue
            parsed = parse_statement(statement)
            if isinstance(parsed, str):
                spoken.append(await self._say(parsed, on_delta, after=bool(spoken)))
            else:
                name, arguments = parsed
                calls.append(ToolCall(f"call_{position}_{len(calls)}", name, arguments))
        text_out = "\n".join(spoken)
        return ModelResponse(
            text_out, tuple(calls), Usage(len(text.split()), len(text_out.split()))
        )

    async def _summarise(self, after: Sequence[Message], on_delta: OnDelta) -> ModelResponse:
        lines = []
        # Results in the order the calls were made, not the order they finished in.
        order = {call.id: n for m in after for n, call in enumerate(m.tool_calls)}
        results = sorted(
            (m for m in after if m.role is Role.TOOL),
            key=lambda m: order.get(m.tool_call_id or "", len(order)),
        )
        for message in results:
            if message.role is Role.TOOL:
                content = message.content
                if message.name == "ask_user":
                    lines.append(f"You answered: {content}")
                else:
                    preview = content if len(content) <= 200 else content[:200] + "..."
                    lines.append(f"{message.name}: {preview}")
        text = "Done." if not lines else "Done.\n" + "\n".join(lines)
        await self._say(text, on_delta)
        return ModelResponse(text, (), Usage(0, len(text.split())))

    async def _say(
        self, text: str, on_delta: OnDelta, delay: float | None = None, *, after: bool = False
    ) -> str:
        """Stream `text` word by word; `after` starts it on a new line (a later statement)."""
        pause = self.word_delay if delay is None else delay
        if after:
            await on_delta(TextDelta("\n"))
        words = text.split(" ")
        for i, word in enumerate(words):
            await trio.sleep(pause)
            await on_delta(TextDelta(word if i == 0 else " " + word))
        return text


@record
class ReplayTurn:
    """One recorded model turn."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    delay: float = 0.0


@record
class ReplayModel:
    """Plays back a scripted conversation: the Nth response is the file's Nth turn.

    The file is JSON: ``{"turns": [{"text": "...", "tool_calls": [{"name": "write_file",
    "arguments": {...}}], "delay": 0.05}]}``. ``delay`` paces the words of the text.
    Turns are counted from the assistant messages already in the conversation, so
    a resumed task continues where it stopped.
    """

    turns: tuple[ReplayTurn, ...]
    source: str = "replay"

    @classmethod
    def from_file(cls, path: StrPath) -> ReplayModel:
        """Read a replay file; raises ValueError saying what is wrong with it."""
        path = Path(path)
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read replay file {path}: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("turns"), list):
            raise ValueError(f"replay file {path}: expected an object with a 'turns' list")
        turns = []
        for n, raw in enumerate(data["turns"]):
            if not isinstance(raw, dict):
                raise ValueError(f"replay file {path}: turn {n} is not an object")
            calls = []
            for k, call in enumerate(raw.get("tool_calls", [])):
                if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    raise ValueError(f"replay file {path}: turn {n} call {k} needs a 'name'")
                args = call.get("arguments", {})
                if not isinstance(args, dict):
                    raise ValueError(
                        f"replay file {path}: turn {n} call {k}: 'arguments' must be an object"
                    )
                calls.append(ToolCall(str(call.get("id", f"replay_{n}_{k}")), call["name"], args))
            turns.append(
                ReplayTurn(str(raw.get("text", "")), tuple(calls), float(raw.get("delay", 0.0)))
            )
        return cls(tuple(turns), f"replay:{path}")

    @property
    def name(self) -> str:
        """``"replay:PATH"``."""
        return self.source

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], on_delta: OnDelta
    ) -> ModelResponse:
        """The next recorded turn, its text streamed word by word."""
        index = sum(1 for m in messages if m.role is Role.ASSISTANT)
        if index >= len(self.turns):
            raise ModelError(
                f"{self.source}: the script has {len(self.turns)} turns and all were played"
            )
        turn = self.turns[index]
        words = turn.text.split(" ") if turn.text else []
        for i, word in enumerate(words):
            await trio.sleep(turn.delay)
            await on_delta(TextDelta(word if i == 0 else " " + word))
        await trio.lowlevel.checkpoint()
        return ModelResponse(turn.text, turn.tool_calls)

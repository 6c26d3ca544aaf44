"""A call of an MCP server's tool (``NAME__tool``): confirmed, recorded, made, its questions asked.

The server's tools are not classes of their own: their schemas are the
servers' (`agentrt.agent.mcp.McpClients.specs`). A call is confirmed unless
its server is trusted (``trust = true``) or the tool is among its
``trusted_tools``; a call that may already have run (attempt 2 or later) is
confirmed all the same. Its start is recorded before the request is sent, so
a stop leaves it *stopped while running* and a resume says it may already
have run.

A server's elicitation during the call becomes questions of the call's run,
asked as ``store_secret`` asks (inline, through the pending registry, to the
front-end that started the run): first whether to answer at all (``accept``,
``decline``, ``cancel``: MCP's three actions), then each field of the
requested schema in turn: a choice for an enum or a boolean, a typed answer
for a string or a number (checked, asked again when it does not fit), a
masked one for a field whose ``format`` is ``password`` (refused over chat
services, as a secret is).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from typing import Final

from ...core.policy import origin_rules
from ...models.messages import ToolCall
from ...vocab.clamp import clamp
from ...vocab.request import Request
from ...vocab.terms import DENY
from ...vocab.terms import TERMINAL
from ...vocab.terms import RequestKind
from ...vocab.terms import origin_of
from ..mcp import Elicitation
from ..mcp import ElicitReply
from ..mcp import McpCallError
from ..mcp import McpClients
from .base import DENIED
from .base import PROMPT_LIMIT
from .base import QuestionParked
from .base import ToolError
from .base import ToolRefused
from .base import ToolRun

#: MCP's three answers to an elicitation, as the first question's choices.
ELICIT_ACTIONS: Final = ("accept", "decline", "cancel")
#: A boolean field's choices.
YES_NO: Final = ("yes", "no")


async def call_mcp_tool(agent: ToolRun, call: ToolCall, clients: McpClients) -> str:
    """Run `call` of a tool of one of `clients`' servers; the text the model reads."""
    config, tool = clients.config_of(call.name)
    server = clients.servers[config.name]
    if (
        config.transport == "stdio"
        and not server.sandboxed
        and origin_of(agent.context.session_id) != TERMINAL
    ):
        raise ToolRefused(
            f"refused: MCP server {config.name!r} runs outside the sandbox, and tools never "
            "run unsandboxed for a chat or web session; call it from a terminal"
        )
    if not config.trusts(tool) or agent.attempt(call) > 1:
        shown = json.dumps(call.arguments, ensure_ascii=False)
        prompt = clamp(f"{config.name}: {tool} {shown}", PROMPT_LIMIT)
        if not await agent.confirm(call, prompt):
            return DENIED
    await agent.begin_effect(call)

    async def ask(elicitation: Elicitation) -> ElicitReply:
        return await _elicit(agent, call, elicitation)

    async def progress(done: float, total: float | None, message: str | None) -> None:
        await agent.progress(call, done, total, message or "")

    try:
        return await clients.call(call.name, dict(call.arguments), ask=ask, progress=progress)
    except McpCallError as exc:
        raise ToolError(str(exc)) from None


async def _elicit(agent: ToolRun, call: ToolCall, elicitation: Elicitation) -> ElicitReply:
    """Ask the run's person `elicitation`; MCP's action and, when accepted, the content."""
    if not agent.has_listener():
        return "cancel", None
    prompt = clamp(f"MCP server {elicitation.server} asks: {elicitation.message}", PROMPT_LIMIT)
    try:
        gate = await agent.ask_inline(
            call.id, Request(RequestKind.CONFIRM, prompt, ELICIT_ACTIONS, tool=call.name)
        )
        if gate.value != "accept":
            return ("decline" if gate.value == "decline" else "cancel"), None
        content: dict[str, Any] = {}
        properties = elicitation.schema.get("properties") or {}
        required = set(elicitation.schema.get("required") or ())
        for name, field in properties.items():
            if not isinstance(field, Mapping):
                continue
            value = await _field(agent, call, name, field, name in required)
            if value is _DECLINED:
                return "decline", None
            if value is not None:
                content[name] = value
        return "accept", content
    except QuestionParked:
        # Nobody is left to answer: the server hears so, and the call goes on without it.
        return "cancel", None


_DECLINED: Final[Any] = object()


async def _field(
    agent: ToolRun, call: ToolCall, name: str, field: Mapping[str, Any], required: bool
) -> Any:
    """The person's value of one field (None when an optional one is left empty)."""
    title = str(field.get("title") or name)
    about = f" ({field['description']})" if field.get("description") else ""
    kind = field.get("type", "string")
    choices = field.get("enum")
    if isinstance(choices, list) and choices:
        answer = await agent.ask_inline(
            call.id,
            Request(
                RequestKind.CONFIRM,
                clamp(f"{title}{about}", PROMPT_LIMIT),
                tuple(str(c) for c in choices),
                tool=call.name,
            ),
        )
        return answer.value
    if kind == "boolean":
        answer = await agent.ask_inline(
            call.id,
            Request(
                RequestKind.CONFIRM, clamp(f"{title}{about}", PROMPT_LIMIT), YES_NO, tool=call.name
            ),
        )
        return answer.value == "yes"
    if kind == "string" and (field.get("format") == "password" or field.get("writeOnly")):
        if not origin_rules(agent.context.origin).takes_secrets:
            raise ToolRefused(
                f"refused: field {title!r} asks for a secret, which must not travel through "
                "a chat service; make this call from the terminal (agenttui) or the web page"
            )
        answer = await agent.ask_inline(
            call.id,
            Request(RequestKind.SECRET, clamp(f"{title}{about}", PROMPT_LIMIT), tool=call.name),
        )
        if answer.value == DENY or answer.secret is None:
            return _DECLINED
        return answer.secret
    error: str | None = None
    optional = "" if required else " (optional: Enter leaves it out)"
    while True:
        answer = await agent.ask_inline(
            call.id,
            Request(
                RequestKind.QUESTION,
                clamp(f"{title}{about}{optional}", PROMPT_LIMIT),
                tool=call.name,
                error=error,
            ),
        )
        text = answer.value.strip()
        if not text and not required:
            return None
        try:
            return _typed(text, kind)
        except ValueError as exc:
            error = str(exc)


def _typed(text: str, kind: Any) -> Any:
    """`text` as a value of JSON type `kind`; `ValueError` saying what fits."""
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
    if kind == "number":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    if not text:
        raise ValueError("an answer is needed")
    return text

"""Tools that ask the human: a question (`ask_user`) and a secret (`store_secret`)."""

from __future__ import annotations

from typing import ClassVar

import trio

from ...config.secrets import SecretNameError
from ...core.policy import origin_rules
from ...models.messages import ToolCall
from ...vocab.clamp import clamp
from ...vocab.reprs import record
from ...vocab.request import Request
from ...vocab.terms import DENY
from ...vocab.terms import RequestKind
from .base import PROMPT_LIMIT
from .base import QuestionParked
from .base import Tool
from .base import ToolError
from .base import ToolRefused
from .base import ToolRun


@record
class AskUser(Tool):
    """``ask_user``: inline from a terminal; elsewhere the run parks on the question."""

    NAME: ClassVar = "ask_user"
    DESCRIPTION: ClassVar = "Ask the human a question and wait for the answer."

    question: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        # Redacted as the saved question is, so an answer given ahead is found by it.
        prompt = clamp(agent.config.redactor.redact(self.question), PROMPT_LIMIT)
        if prompt in agent.prefilled:
            # A subagent asked this before its parent parked on it; the answer came with
            # the resume.
            return agent.prefilled.pop(prompt)
        if origin_rules(agent.context.origin).asks_inline and agent.has_listener():
            # From a terminal run the question goes inline and this run continues.
            answer = await agent.ask_inline(call.id, Request.question(prompt))
            return answer.value
        # From any other origin: commit the round, snapshot, end; the answer resumes it. A
        # subagent's question parks its parent the same way (see `Spawn`).
        raise QuestionParked(prompt, RequestKind.QUESTION)


@record
class StoreSecret(Tool):
    """``store_secret``: a masked field; the value is stored, the model sees only the name."""

    NAME: ClassVar = "store_secret"
    RECORDS_START: ClassVar = True
    DESCRIPTION: ClassVar = (
        "Ask the human for a secret value and store it under a name; you see only the name."
    )

    name: str

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        name = self.name
        try:
            agent.config.secrets.get(name)  # validates the name before anyone is asked
        except SecretNameError as exc:
            raise ToolError(str(exc)) from None
        if not origin_rules(agent.context.origin).takes_secrets:
            raise ToolRefused(
                f"refused: secret {name!r} must not travel through a chat service; store it "
                "from the terminal (agenttui) or the web page"
            )
        if await agent.nobody_to_answer():
            raise ToolError(f"cannot ask for secret {name!r}: nobody is connected to type it")
        request = Request.secret(name)
        answer = await agent.ask_inline(call.id, request)
        if answer.value == DENY or answer.secret is None:
            return f"the user declined to store secret {name!r}"
        await agent.begin_effect(call)
        await trio.to_thread.run_sync(agent.config.secrets.put, name, answer.secret)
        return f"stored secret {name!r}"

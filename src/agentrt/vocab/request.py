"""A question for a person: `Request`, the one declaration of what is asked.

Every shape of a question is built from it: the registry's `Entry` carries one,
the daemon's `AskFrame` is its fields after the question's id, task and
session, the JSON of `/v1/questions` and ``agentrt --json`` is its fields after
the same three and the asking agent, and a task parked on a question saves its
prompt and kind (`SavedQuestion`). Whether the answer is typed into a masked
field follows from the kind, and is decided here only (`Request.masked`).
"""

from __future__ import annotations

import attrs

from .reprs import record
from .terms import CONFIRM_CHOICES
from .terms import RequestKind

#: The kinds whose answer is typed into a masked field: a secret's value, the system password.
MASKED_KINDS: frozenset[RequestKind] = frozenset({RequestKind.SECRET, RequestKind.PASSWORD})


def _masked(self: Request) -> bool:
    return self.kind in MASKED_KINDS


@record
class Request:
    """What a producer asks. Immutable; the registry wraps it in an `Entry`."""

    kind: RequestKind
    prompt: str
    choices: tuple[str, ...] = ()
    #: True when the answer must be typed into a masked field: made from `kind`, never given.
    masked: bool = attrs.field(init=False, default=attrs.Factory(_masked, takes_self=True))
    #: The tool whose call raised the request, if any.
    tool: str | None = None
    #: The previous attempt's failure, shown with a retried request ("wrong password").
    error: str | None = None
    #: What a confirmed file change does, as a unified diff (``--- a/PATH``, ``+++ b/PATH``,
    #: ``@@`` hunks), bounded and redacted (`agentrt.agent.tools.diff`); None for other asks.
    diff: str | None = None

    @classmethod
    def confirm(cls, tool: str, prompt: str, diff: str | None = None) -> Request:
        """A tool-call confirmation with the standard choices."""
        return cls(RequestKind.CONFIRM, prompt, CONFIRM_CHOICES, tool=tool, diff=diff)

    @classmethod
    def question(cls, prompt: str) -> Request:
        """An `ask_user` question."""
        return cls(RequestKind.QUESTION, prompt, tool="ask_user")

    @classmethod
    def secret(cls, name: str) -> Request:
        """A masked request for the value of secret `name`."""
        return cls(RequestKind.SECRET, f"Value for secret {name!r}", tool="store_secret")

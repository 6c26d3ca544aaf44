"""What each origin allows, and who may act on which session: the tables every front-end uses.

A session's origin (the prefix of its id) decides how its questions are asked
and what may be typed there:

==========  ===============================  =======================================
origin      ``ask_user``                     secrets and the system password
==========  ===============================  =======================================
``cli-``    asked inline; the run goes on    typed into a masked field
``chat-``   saved; the run ends, the answer  typed into a masked field of the page
            resumes it
``tg-``     saved, as for ``chat-``          refused: never through a chat service
``dc-``     saved, as for ``chat-``          refused: never through a chat service
unknown     saved, as for ``chat-``          typed into a masked field
==========  ===============================  =======================================

Who may act on which session:

====================  ============================================================
front-end             may start runs in, list, resume, answer, discard
====================  ============================================================
a terminal window     ``cli-`` sessions it owns, and ``cli-`` sessions whose window
                      is gone (the spec's ``/pending`` from a new window)
the HTTP API          ``chat-`` sessions; besides, it may list, resume and discard
                      (never start) ``cli-`` tasks of windows that are gone
a chat (Telegram,     its own session only (``tg-<chat>``, ``dc-<channel>``)
Discord)
the owner's           every session of every origin, as in the store (the
``agentrt`` command   command reaches the daemon over its socket, which only the
                      owner's uid may use; that user can open the store anyway)
====================  ============================================================

A session a front-end may not act on is answered exactly like a session that
does not exist, so no front-end can probe for another's sessions.

Which tool calls run without a confirmation (`auto_approves`), by approval policy:

=============  =========================  ======================  ==================
policy         ``write_file`` or          ``write_file`` or       ``shell``
               ``edit_file`` in the       ``edit_file``
               working folder             elsewhere
=============  =========================  ======================  ==================
``ask``        confirmed                  confirmed               confirmed
``auto-edit``  runs                       confirmed               confirmed
``full-auto``  runs                       runs                    runs
=============  =========================  ======================  ==================

The tools that only read (``read_file``, ``list_dir``, ``glob``, ``grep``) are
never confirmed, under any policy (but a restricted path's ``read_file`` takes
the system password). Under every policy every tool process runs in the workspace-write sandbox
(`agentrt.agent.sandbox`): a write outside the working folder fails however it is
spelled, so ``write_file`` elsewhere is refused before anything is asked; a
restricted path needs the system password (and only then becomes writable);
the agent's own state (store, secrets, keys, token, socket) and its
configuration are hidden from tools; a command naming agentrt's configuration
is confirmed; and a call that may already have run (an earlier attempt was not
committed) is confirmed. Where no sandbox can be had, every call is confirmed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

from ..agent.guard import command_touches
from ..agent.guard import inside
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from ..vocab.terms import DISCORD
from ..vocab.terms import TELEGRAM
from ..vocab.terms import TERMINAL
from ..vocab.terms import WEB
from ..vocab.terms import Approval
from ..vocab.terms import origin_of


@record
class OriginRules:
    """What a session's origin allows, whichever front-end acts on it (the first table above)."""

    #: `ask_user` is asked inline and the same run goes on; elsewhere the run parks on it.
    asks_inline: bool
    #: A secret or the system password may be typed there; never through a chat service.
    takes_secrets: bool


#: The rules of each origin; ``""`` is a session id with no known origin.
ORIGIN_RULES: Final[Mapping[str, OriginRules]] = {
    TERMINAL: OriginRules(asks_inline=True, takes_secrets=True),
    WEB: OriginRules(asks_inline=False, takes_secrets=True),
    TELEGRAM: OriginRules(asks_inline=False, takes_secrets=False),
    DISCORD: OriginRules(asks_inline=False, takes_secrets=False),
    "": OriginRules(asks_inline=False, takes_secrets=True),
}


def origin_rules(session_id: str) -> OriginRules:
    """The rules of the origin of `session_id` (an origin prefix itself works too)."""
    return ORIGIN_RULES[origin_of(session_id)]


class Front(enum.Enum):
    """The kinds of front-end the policy tells apart."""

    TERMINAL = "terminal"
    HTTP = "http"
    CHAT = "chat"
    OWNER = "owner"


@record
class Actor:
    """Who is asking: a front-end kind, plus the window or chat it speaks for."""

    front: Front
    #: The window a terminal connection speaks for.
    window: str | None = None
    #: The one session a chat may use.
    session: str | None = None

    @classmethod
    def terminal(cls, window: str) -> Actor:
        """A terminal window (a daemon connection)."""
        return cls(Front.TERMINAL, window=window)

    @classmethod
    def http(cls) -> Actor:
        """The HTTP API and the web page."""
        return cls(Front.HTTP)

    @classmethod
    def chat(cls, session: str) -> Actor:
        """A Telegram or Discord chat, bound to its session."""
        return cls(Front.CHAT, session=session)

    @classmethod
    def owner(cls) -> Actor:
        """The owner's `agentrt` command (a daemon connection with scope ``all``)."""
        return cls(Front.OWNER)


@mutable(eq=False)
class LiveWindows:
    """The terminal windows that have a live connection, and which connection holds each."""

    _holders: dict[str, object] = attrs.field(factory=dict, init=False)

    def claim(self, window: str, holder: object) -> bool:
        """Bind `window` to `holder`; False when another holder has it."""
        current = self._holders.get(window)
        if current is not None and current is not holder:
            return False
        self._holders[window] = holder
        return True

    def release(self, window: str, holder: object) -> None:
        """Forget `window` if `holder` holds it."""
        if self._holders.get(window) is holder:
            del self._holders[window]

    def is_live(self, window: str) -> bool:
        """Whether a live connection holds `window`."""
        return window in self._holders


@mutable(eq=False)
class AccessPolicy:
    """Applies the table above. `owner` is the window recorded for the session, if any."""

    windows: LiveWindows = attrs.field(factory=LiveWindows)

    def _window_free_for(self, actor: Actor, owner: str | None) -> bool:
        return owner is None or owner == actor.window or not self.windows.is_live(owner)

    def may_act_on_every_task(self, actor: Actor) -> bool:
        """Whether `may_act` lets `actor` act on any task whatever: a listing then asks once.

        So it is for the machine's owner (the `agentrt` command).
        """
        return actor.front is Front.OWNER

    def may_act(self, actor: Actor, session_id: str, owner: str | None) -> bool:
        """Whether `actor` may list, resume, answer or discard the task of `session_id`."""
        if self.may_act_on_every_task(actor):
            return True
        origin = origin_of(session_id)
        if actor.front is Front.CHAT:
            return session_id == actor.session
        if actor.front is Front.TERMINAL:
            return origin == TERMINAL and self._window_free_for(actor, owner)
        if origin == WEB:
            return True
        return origin == TERMINAL and (owner is None or not self.windows.is_live(owner))

    def may_start(self, actor: Actor, session_id: str, owner: str | None) -> bool:
        """Whether `actor` may start a run in `session_id` (new, or continuing its history)."""
        if actor.front is Front.HTTP:
            return origin_of(session_id) == WEB
        return self.may_act(actor, session_id, owner)


# -- approval ---------------------------------------------------------------------------


@record
class Edit:
    """A tool call that writes the file at `path` (resolved)."""

    path: Path


@record
class Command:
    """A tool call that runs a shell command."""

    command: str


def auto_approves(
    approval: Approval,
    action: Edit | Command,
    *,
    workdir: Path,
    guarded: Sequence[Path] = (),
) -> bool:
    """Whether `approval` lets `action` run without a confirmation (the table above).

    `guarded` is agentrt's own configuration, which an agent must never change
    unasked (it could raise its own approval policy). Restricted and protected
    paths never get here: they take the password, or are refused.
    """
    if approval is Approval.ASK:
        return False
    if isinstance(action, Edit):
        if inside(action.path, guarded) is not None:
            return False
        return approval is Approval.FULL_AUTO or inside(action.path, (workdir,)) is not None
    if approval is not Approval.FULL_AUTO:
        return False
    return command_touches(action.command, workdir, guarded) is None

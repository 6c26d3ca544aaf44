"""Who may act on which session: one table for every front-end.

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
"""

from __future__ import annotations

import enum

import attrs

from ._context import origin_of


class Front(enum.Enum):
    """The kinds of front-end the policy tells apart."""

    TERMINAL = "terminal"
    HTTP = "http"
    CHAT = "chat"
    OWNER = "owner"


@attrs.frozen
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


@attrs.define(eq=False)
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


@attrs.define(eq=False)
class AccessPolicy:
    """Applies the table above. `owner` is the window recorded for the session, if any."""

    windows: LiveWindows = attrs.field(factory=LiveWindows)

    def _window_free_for(self, actor: Actor, owner: str | None) -> bool:
        return owner is None or owner == actor.window or not self.windows.is_live(owner)

    def may_act(self, actor: Actor, session_id: str, owner: str | None) -> bool:
        """Whether `actor` may list, resume, answer or discard the task of `session_id`."""
        origin = origin_of(session_id)
        if actor.front is Front.OWNER:
            return True
        if actor.front is Front.CHAT:
            return session_id == actor.session
        if actor.front is Front.TERMINAL:
            return origin == "cli-" and self._window_free_for(actor, owner)
        if origin == "chat-":
            return True
        return origin == "cli-" and (owner is None or not self.windows.is_live(owner))

    def may_start(self, actor: Actor, session_id: str, owner: str | None) -> bool:
        """Whether `actor` may start a run in `session_id` (new, or continuing its history)."""
        if actor.front is Front.HTTP:
            return origin_of(session_id) == "chat-"
        return self.may_act(actor, session_id, owner)

"""The daemon's logging: every record is scrubbed of secrets before a handler writes it.

Libraries log what they see: httpx logs each request's URL at INFO, and a
Telegram URL carries the bot token (``/bot<token>/getUpdates``); an exception
message can quote a header or a value. So instead of trusting each logger,
the daemon puts `SecretFilter` on its log handlers, where every record ends
up whatever logger made it, and replaces each known secret with ``[secret
NAME]``: the bot tokens and API keys in the environment, the HTTP API's
token, and every value in the secret store and the key store, in every
spelling `agentrt.agent.guard.Redactor` finds (read again when the store or the
token file changes: at once for this process's writes, within
`agentrt.agent.guard.RECHECK_SECONDS` for another process's).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import traceback
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from ...agent.guard import MIN_REDACTED_LENGTH
from ...agent.guard import Redactor

#: Environment variables whose values are secrets, by name.
_SECRET_ENV = re.compile(r"(?:^|_)(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|APIKEY)$")
#: A Telegram bot token in a Bot API URL, known or not.
_TELEGRAM_URL_TOKEN = re.compile(r"/bot\d+:[A-Za-z0-9_-]+")

Secrets = Iterable[tuple[str, str]]


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(name, value)`` of the variables named like a token, key, secret or password."""
    env = os.environ if environ is None else environ
    return [(name, value) for name, value in env.items() if _SECRET_ENV.search(name.upper())]


class SecretFilter(logging.Filter):
    """Replaces every known secret in a record (message, traceback, stack) by ``[secret NAME]``.

    Put it on handlers, not loggers: a logger's filters see only the records
    logged on that very logger, a handler's see every record it writes.
    `sources` are called for each record; each returns ``(name, value)`` pairs,
    found as they are and URL-quoted. `redactor`, if given, is applied first,
    with every spelling it knows (encodings, wrapped lines).
    """

    def __init__(self, *sources: Callable[[], Secrets], redactor: Redactor | None = None) -> None:
        super().__init__()
        self._sources = sources
        self._redactor = redactor
        self._known: tuple[tuple[str, str], ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self._names: dict[str, str] = {}

    def redact(self, text: str) -> str:
        """`text` with every known secret replaced."""
        if self._redactor is not None:
            text = self._redactor.redact(text)
        self._refresh()
        if self._pattern is not None:
            text = self._pattern.sub(lambda m: f"[secret {self._names[m.group(0)]}]", text)
        return _TELEGRAM_URL_TOKEN.sub("/bot[secret telegram token]", text)

    def filter(self, record: logging.LogRecord) -> bool:
        """Scrub `record` in place; it is always let through."""
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep what can be shown without its arguments
            message = f"{record.msg} (its arguments could not be formatted)"
        record.msg = self.redact(message)
        record.args = None
        if record.exc_info and record.exc_info[0] is not None:
            # Formatters reuse exc_text once it is set, so the unscrubbed one is never made.
            record.exc_text = self.redact(
                "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            )
        elif record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True

    def _refresh(self) -> None:
        known: list[tuple[str, str]] = []
        for source in self._sources:
            known.extend((n, v) for n, v in source() if len(v) >= MIN_REDACTED_LENGTH)
        if tuple(known) == self._known:
            return
        self._known = tuple(known)
        names: dict[str, str] = {}
        for name, value in known:
            for form in (value, quote(value, safe="")):
                names.setdefault(form, name)
        # The longest first, so a secret that contains another is replaced whole.
        forms = sorted(names, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, forms))) if forms else None
        self._names = names


def configure_logging(state_dir: Path, *, verbose: bool) -> SecretFilter:
    """Log to stderr (INFO with `verbose`, else WARNING), with secrets scrubbed from every record.

    Uncaught exceptions are logged through the same handler, so a crash's
    traceback is scrubbed too.
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="agentrt daemon: %(message)s",
    )
    stored = Redactor.for_state_dir(state_dir)
    secret_filter = SecretFilter(environment_secrets, stored.values, redactor=stored)
    for handler in logging.getLogger().handlers:
        handler.addFilter(secret_filter)

    def log_uncaught(
        kind: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        logging.getLogger("agentrt.daemon").critical(
            "the daemon stopped on an error", exc_info=(kind, exc, tb)
        )

    sys.excepthook = log_uncaught
    return secret_filter

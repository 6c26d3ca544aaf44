"""Sending one HTTP request to a chat service until it gets through or clearly will not.

`LazyTransport` is the transport a bot hands its `ChatBridge` before its HTTP
client exists: it sends through the client once the bot's ``run`` has opened it.

Both services answer a too-fast client with HTTP 429 and say how long to wait
(Telegram in ``parameters.retry_after``, Discord in ``retry_after`` and the
``Retry-After`` header); both fail now and then with a 5xx or a dropped
connection. `send_with_retries` waits what the service asks on a 429, backs
off exponentially on the rest, and gives up with a `DeliveryError` in our own
words: an httpx error is never chained, because its request carries the
token (in Telegram's case, in the URL).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence

import attrs
import httpx
import trio

from ...config.retry import RetryPolicy
from ...vocab.reprs import mutable
from .conversation import Button
from .conversation import ChatTransport
from .conversation import DeliveryError

log = logging.getLogger("agentrt.bots")


async def send_with_retries(
    send: Callable[[], Awaitable[httpx.Response]],
    *,
    what: str,
    retry_after: Callable[[httpx.Response], float | None],
    policy: RetryPolicy,
) -> httpx.Response:
    """The first response that is neither a 429 nor a 5xx, after retries.

    `retry_after` reads a 429 response's wait in seconds. Raises
    `DeliveryError` naming `what` once `policy.max_attempts` are spent.
    """
    failures = 0
    attempt = 0
    while True:
        attempt += 1
        wait: float
        try:
            response = await send()
        except httpx.TransportError as exc:
            failures += 1
            reason = f"network error ({type(exc).__name__})"
            wait = policy.backoff(failures)
        else:
            if response.status_code == 429:
                asked = retry_after(response)
                wait = 1.0 if asked is None else max(asked, 0.0)
                if not policy.obeys(wait):
                    raise DeliveryError(f"{what}: rate limited for {wait:g}s; giving up")
                reason = f"rate limited, retrying after {wait:g}s"
                failures = 0
            elif response.status_code >= 500:
                failures += 1
                reason = f"server error (HTTP {response.status_code})"
                wait = policy.backoff(failures)
            else:
                return response
        if policy.exhausted(attempt):
            raise DeliveryError(f"{what}: {reason}; gave up after {attempt} tries")
        log.info("%s: %s", what, reason)
        await trio.sleep(wait)


def header_retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds, when it is a number."""
    raw = response.headers.get("retry-after")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


@mutable(eq=False)
class LazyTransport:
    """A bot's `ChatTransport`, usable once its ``run`` has opened the HTTP client.

    `connected` returns the transport over the open client, or None before
    that; sending then raises `DeliveryError` naming the `service`.
    `text_length` is `measure`, which needs no client.
    """

    service: str
    connected: Callable[[], ChatTransport | None] = attrs.field(repr=False)
    max_text: int
    typing_every: float
    measure: Callable[[str], int] = attrs.field(default=len, repr=False)

    def _transport(self) -> ChatTransport:
        transport = self.connected()
        if transport is None:
            raise DeliveryError(f"the {self.service} bot is not running")
        return transport

    def text_length(self, text: str) -> int:
        """`measure`'s count of `text`."""
        return self.measure(text)

    async def send(
        self, chat: str, text: str, buttons: Sequence[Button] = (), *, markdown: bool = False
    ) -> str:
        """Send through the open transport."""
        return await self._transport().send(chat, text, buttons, markdown=markdown)

    async def edit(self, chat: str, message_id: str, text: str, *, markdown: bool = False) -> None:
        """Edit through the open transport."""
        await self._transport().edit(chat, message_id, text, markdown=markdown)

    async def typing(self, chat: str) -> None:
        """Show typing through the open transport."""
        await self._transport().typing(chat)

"""Sending one HTTP request to a chat service until it gets through or clearly will not.

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
from collections.abc import Awaitable, Callable

import attrs
import httpx
import trio

from ._bridge import DeliveryError

log = logging.getLogger("agentrt.bots")

#: The longest wait a 429 may impose before we give up instead (a ban, not a limit).
MAX_RETRY_AFTER = 600.0


@attrs.frozen
class RetryPolicy:
    """How often and how patiently a request is retried."""

    #: Tries in all, the first included; None retries for ever (long polls, gateways).
    attempts: int | None = 6
    #: The first back-off after a network error or a 5xx, doubled each time.
    base_delay: float = 0.5
    max_delay: float = 30.0

    def delay(self, failures: int) -> float:
        """The back-off after `failures` consecutive failures (1 for the first)."""
        return float(min(self.base_delay * 2 ** (failures - 1), self.max_delay))


async def send_with_retries(
    send: Callable[[], Awaitable[httpx.Response]],
    *,
    what: str,
    retry_after: Callable[[httpx.Response], float | None],
    policy: RetryPolicy,
) -> httpx.Response:
    """The first response that is neither a 429 nor a 5xx, after retries.

    `retry_after` reads a 429 response's wait in seconds. Raises
    `DeliveryError` naming `what` once `policy.attempts` are spent.
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
            wait = policy.delay(failures)
        else:
            if response.status_code == 429:
                asked = retry_after(response)
                wait = 1.0 if asked is None else max(asked, 0.0)
                if wait > MAX_RETRY_AFTER:
                    raise DeliveryError(f"{what}: rate limited for {wait:g}s; giving up")
                reason = f"rate limited, retrying after {wait:g}s"
                failures = 0
            elif response.status_code >= 500:
                failures += 1
                reason = f"server error (HTTP {response.status_code})"
                wait = policy.delay(failures)
            else:
                return response
        if policy.attempts is not None and attempt >= policy.attempts:
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

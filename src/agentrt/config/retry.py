"""How patiently a request to a remote service is sent again: one policy for models and bots."""

from __future__ import annotations

from ..vocab.reprs import record


@record
class RetryPolicy:
    """How often and how patiently a failed request is sent again.

    Waits double from `base_delay` up to `max_delay`. A server that says how
    long to wait (``retry-after``) is obeyed instead, unless it asks for more
    than `max_retry_after` seconds: then the caller gives up at once (better to
    tell the user than to hang). No jitter: this is one user's client, not a
    fleet that could stampede.

    A model provider retries only what failed before any of the reply reached
    the caller (`agentrt.providers`); a bot retries a message until it is
    delivered (`agentrt.bots`). Each has its own defaults: `MODEL_RETRY`,
    `CHAT_RETRY`.
    """

    #: Tries in all, the first included; None retries for ever (long polls, gateways).
    max_attempts: int | None = 3
    #: The first wait after a failure, doubled after each further one.
    base_delay: float = 0.5
    max_delay: float = 8.0
    #: The longest wait a server may ask for before the caller gives up instead.
    max_retry_after: float = 60.0

    def backoff(self, failures: int) -> float:
        """Seconds to wait after `failures` failures in a row (1 for the first)."""
        return float(min(self.base_delay * 2 ** (failures - 1), self.max_delay))

    def exhausted(self, attempts: int) -> bool:
        """True once `attempts` tries (the first counts as 1) are all the policy allows."""
        return self.max_attempts is not None and attempts >= self.max_attempts

    def obeys(self, retry_after: float) -> bool:
        """True when a server's ``retry-after`` is short enough to wait out."""
        return retry_after <= self.max_retry_after


#: A model's reply: a few quick tries, since a person is watching the run.
MODEL_RETRY = RetryPolicy()
#: A chat service's message: more tries and longer waits, since it must get through.
CHAT_RETRY = RetryPolicy(max_attempts=6, max_delay=30.0, max_retry_after=600.0)

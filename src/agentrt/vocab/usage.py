"""Tokens a model read and wrote, by round, run and session, and what they cost."""

from __future__ import annotations

from collections.abc import Iterable

from .reprs import record


@record
class TokenCount:
    """Tokens of one or more model responses.

    `input_tokens` counts every prompt token, cached or not; `cached_tokens` of
    them came from the provider's prompt cache. `reasoning_tokens` are the part
    of `output_tokens` the model spent reasoning (when the provider says).
    """

    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: TokenCount) -> TokenCount:
        return TokenCount(
            self.rounds + other.rounds,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    @classmethod
    def total(cls, counts: Iterable[TokenCount]) -> TokenCount:
        """The sum of `counts`."""
        out = cls()
        for count in counts:
            out = out + count
        return out

    def words(self) -> str:
        """``12,345 in (1,024 cached), 678 out (12 reasoning)``."""
        return (
            f"{self.input_tokens:,} in ({self.cached_tokens:,} cached), "
            f"{self.output_tokens:,} out ({self.reasoning_tokens:,} reasoning)"
        )


@record
class RunTokens:
    """The tokens of one run (task) of a session with one model, and their cost in US
    dollars (None: no price is known for the model)."""

    task_hash: str
    model: str
    tokens: TokenCount
    cost: float | None = None


def cost_words(cost: float | None) -> str:
    """``$0.0123``, or ``cost unknown``."""
    return "cost unknown" if cost is None else f"${cost:.4f}"

"""What a model's tokens cost: the default prices of common OpenAI and Anthropic models,
and ``[prices]`` in config.toml for any other (or newer) one."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ..vocab.reprs import record
from ..vocab.usage import RunTokens
from ..vocab.usage import TokenCount


@record
class Price:
    """US dollars a million tokens: prompt tokens, prompt tokens read from the cache,
    and output tokens (reasoning included)."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, tokens: TokenCount) -> float:
        """What `tokens` cost at this price."""
        cached = self.cached_input if self.cached_input is not None else self.input
        fresh = max(0, tokens.input_tokens - tokens.cached_tokens)
        return (
            fresh * self.input + tokens.cached_tokens * cached + tokens.output_tokens * self.output
        ) / 1_000_000


#: When the default prices were read from the providers' pricing pages
#: (openai.com/api/pricing, anthropic.com/pricing). Prices change: ``[prices]`` wins.
PRICES_READ = "2025-06"

#: Default prices by the start of the model's spec, most exact first.
DEFAULT_PRICES: tuple[tuple[str, Price], ...] = (
    ("openai:gpt-4.1-nano", Price(0.10, 0.40, 0.025)),
    ("openai:gpt-4.1-mini", Price(0.40, 1.60, 0.10)),
    ("openai:gpt-4.1", Price(2.00, 8.00, 0.50)),
    ("openai:gpt-4o-mini", Price(0.15, 0.60, 0.075)),
    ("openai:gpt-4o", Price(2.50, 10.00, 1.25)),
    ("openai:o4-mini", Price(1.10, 4.40, 0.275)),
    ("openai:o3-mini", Price(1.10, 4.40, 0.55)),
    ("openai:o3", Price(2.00, 8.00, 0.50)),
    ("openai:o1", Price(15.00, 60.00, 7.50)),
    ("anthropic:claude-opus-4", Price(15.00, 75.00, 1.50)),
    ("anthropic:claude-sonnet-4", Price(3.00, 15.00, 0.30)),
    ("anthropic:claude-3-7-sonnet", Price(3.00, 15.00, 0.30)),
    ("anthropic:claude-3-5-haiku", Price(0.80, 4.00, 0.08)),
)


@record
class Prices:
    """The price table: ``[prices]`` of the configuration over `DEFAULT_PRICES`."""

    table: Mapping[str, Price] = attrs.field(factory=dict)

    def of(self, model: str) -> Price | None:
        """The price of the model named `model` (its spec); None when not known."""
        if model in self.table:
            return self.table[model]
        for prefix, price in DEFAULT_PRICES:
            if model.startswith(prefix):
                return price
        return None

    def priced(self, run: RunTokens) -> RunTokens:
        """`run` with its cost, when its model's price is known."""
        price = self.of(run.model)
        return attrs.evolve(run, cost=None if price is None else price.cost(run.tokens))


def total_cost(runs: tuple[RunTokens, ...]) -> float | None:
    """The cost of `runs` together; None if any has none (a model without a price)."""
    if any(run.cost is None for run in runs):
        return None
    return sum(run.cost or 0.0 for run in runs)

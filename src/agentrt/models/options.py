"""How a provider's model is to be built, as configured: a leaf, so that reading the
configuration never imports an HTTP client (`agentrt.providers` does, when a model is built).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..vocab.reprs import record


@record
class ModelOptions:
    """How to reach a provider's model, as configured.

    None (or an empty table) leaves the provider's own default.
    """

    #: The API's base URL (default: the provider's hosted API).
    base_url: str | None = None
    #: The environment variable (and key-store name) holding the key.
    api_key_env: str | None = None
    #: Extra request headers (OpenRouter's ``HTTP-Referer``, a gateway's, ``OpenAI-Organization``).
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    #: The longest reply, in tokens.
    max_tokens: int | None = None
    #: Sampling temperature.
    temperature: float | None = None

    def given(self) -> dict[str, Any]:
        """The options that are set and that a provider class may take, by field name."""
        options = {
            "headers": dict(self.headers) or None,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        return {name: value for name, value in options.items() if value is not None}

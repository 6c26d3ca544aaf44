"""A provider's model built from the configuration, its key looked up at every request.

`ConfiguredModel` is what ``agentrt``, the daemon and everything behind it run
an ``openai:`` or ``anthropic:`` model with. The key is looked up afresh before
each request (the environment variable, then the key store, see
`agentrt.config.settings.find_api_key`), so a key stored with ``agentrt keys set``
while the daemon runs is used by its next request. Before a run creates its
task, the executor asks `check_ready`: a hosted API without a key is refused
then, and no failed task is left behind.

`ModelOptions` is the one shape the configuration reaches the providers in
(`agentrt.config.settings.model_options`). Each option is given to the provider class
that takes it (an attrs field of that name); `unsent` tells which ones a
provider does not take, and those are reported, never silently dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import attrs

from ..core.errors import ModelNotConfiguredError
from ..vocab.reprs import mutable
from .anthropic import ANTHROPIC_KEY_ENV
from .anthropic import DEFAULT_ANTHROPIC_URL
from .anthropic import AnthropicModel
from .messages import Message
from .messages import ToolSpec
from .openai import DEFAULT_OPENAI_URL
from .openai import OPENAI_KEY_ENV
from .openai import OpenAIModel
from .options import ModelOptions as ModelOptions
from .streaming import ModelCall
from .streaming import StreamedModel

log = logging.getLogger("agentrt.providers")

_CLASSES: dict[str, type[OpenAIModel] | type[AnthropicModel]] = {
    "openai": OpenAIModel,
    "anthropic": AnthropicModel,
}
_HOSTED = {"openai": DEFAULT_OPENAI_URL, "anthropic": DEFAULT_ANTHROPIC_URL}
_KEY_ENV = {"openai": OPENAI_KEY_ENV, "anthropic": ANTHROPIC_KEY_ENV}
_NAMES = {"openai": "OpenAI API", "anthropic": "Anthropic API"}


def unsent(provider: str, options: ModelOptions) -> list[str]:
    """The options set in `options` that the `provider` class takes no field for."""
    taken = attrs.fields_dict(_CLASSES[provider])
    return [name for name in options.given() if name not in taken]


def build_model(
    provider: str, name: str, options: ModelOptions, api_key: str | None
) -> OpenAIModel | AnthropicModel:
    """The provider's model class, given every option it takes."""
    cls = _CLASSES[provider]
    taken = attrs.fields_dict(cls)
    kwargs: dict[str, Any] = {k: v for k, v in options.given().items() if k in taken}
    if options.base_url is not None:
        kwargs["base_url"] = options.base_url
    return cls(name, api_key=api_key, **kwargs)


@mutable(eq=False)
class ConfiguredModel(StreamedModel):
    """An ``openai:`` or ``anthropic:`` model whose key `find_key` looks up at each request.

    `repr` never shows a key. The provider's model is rebuilt only when the key changed.
    """

    provider: str
    model: str
    options: ModelOptions = attrs.field(factory=ModelOptions)
    #: Returns the key now, or None; called before every request.
    find_key: Callable[[], str | None] = attrs.field(default=lambda: None, repr=False)
    _built: tuple[str | None, OpenAIModel | AnthropicModel] | None = attrs.field(
        default=None, init=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        if self.provider not in _CLASSES:
            raise ValueError(f"unknown provider {self.provider!r}; use openai or anthropic")
        for option in unsent(self.provider, self.options):
            log.warning(
                "%s is set, but the %s provider takes no %s: it is not sent",
                option,
                self.provider,
                option,
            )

    @property
    def name(self) -> str:
        """``"openai:<model>"`` or ``"anthropic:<model>"``."""
        return f"{self.provider}:{self.model}"

    @property
    def key_variable(self) -> str:
        """The environment variable (and key-store name) the key is read from."""
        return self.options.api_key_env or _KEY_ENV[self.provider]

    @property
    def hosted(self) -> bool:
        """Whether requests go to the provider's hosted API, which always needs a key."""
        base = self.options.base_url or _HOSTED[self.provider]
        return base.rstrip("/") == _HOSTED[self.provider]

    def check_ready(self) -> None:
        """Raise `ModelNotConfiguredError` when the hosted API would be asked without a key."""
        if self.hosted and not self.find_key():
            variable = self.key_variable
            raise ModelNotConfiguredError(
                f"no API key for the {_NAMES[self.provider]} (model {self.name}): set "
                f"{variable} or store it with 'agentrt keys set {variable}'; for a local "
                "server (Ollama, vLLM, llama.cpp, LM Studio) set its base URL instead"
            )

    def current(self) -> OpenAIModel | AnthropicModel:
        """The provider's model with the key as it is now."""
        key = self.find_key()
        if self._built is None or self._built[0] != key:
            self._built = (key, build_model(self.provider, self.model, self.options, key))
        return self._built[1]

    def call(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelCall:
        """The provider's model's request (see `OpenAIModel.call`), with the key as it is now."""
        return self.current().call(messages, tools)

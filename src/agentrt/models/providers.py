"""Real language models over HTTP: OpenAI-compatible APIs and the Anthropic API.

`make_model("openai:gpt-4o-mini")`, `make_model("anthropic:claude-sonnet-4-5")` or
`make_model("azure:DEPLOYMENT", base_url=ENDPOINT)` builds a streaming `Model`.
A key is taken, in order, from `api_key`, the environment (``OPENAI_API_KEY`` /
``ANTHROPIC_API_KEY`` / ``AZURE_OPENAI_API_KEY``) or the secret store
(``openai_api_key`` / ``anthropic_api_key`` / ``azure_openai_api_key``); the
base URL from `base_url`, else ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, as
the official SDKs read them. Failures raise subclasses of `ProviderError`
(itself a `ModelError`) whose message says what to check. Custom headers,
``max_tokens``, extended thinking and prompt caching are arguments of the model
classes themselves.

`ConfiguredModel` is the form the configuration builds (``agentrt``, the
daemon): its key is looked up at every request, and `ModelOptions` carries
what the configuration says about the provider.
"""

from __future__ import annotations

import os

from ..config.retry import RetryPolicy as RetryPolicy
from ..config.secrets import SecretStore
from .anthropic import ANTHROPIC_KEY_ENV
from .anthropic import ANTHROPIC_KEY_SECRET
from .anthropic import AnthropicModel as AnthropicModel
from .configured import ConfiguredModel as ConfiguredModel
from .configured import ModelOptions as ModelOptions
from .messages import Model
from .openai import AZURE_KEY_ENV
from .openai import AZURE_KEY_SECRET
from .openai import OPENAI_KEY_ENV
from .openai import OPENAI_KEY_SECRET
from .openai import AzureOpenAIModel as AzureOpenAIModel
from .openai import OpenAIModel as OpenAIModel
from .streaming import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from .streaming import ModelAuthError as ModelAuthError
from .streaming import ModelConnectError as ModelConnectError
from .streaming import ModelMaxTokensError as ModelMaxTokensError
from .streaming import ModelNotFoundError as ModelNotFoundError
from .streaming import ModelRateLimitError as ModelRateLimitError
from .streaming import ModelRequestError as ModelRequestError
from .streaming import ModelServerError as ModelServerError
from .streaming import ModelStreamCutError as ModelStreamCutError
from .streaming import ModelStreamError as ModelStreamError
from .streaming import ModelTimeoutError as ModelTimeoutError
from .streaming import ProviderError as ProviderError

_FORMS = (
    "expected 'openai:NAME' (OpenAI or any OpenAI-compatible server such as Ollama,"
    " vLLM, llama.cpp or LM Studio; use base_url for a local one), 'anthropic:NAME'"
    " or 'azure:DEPLOYMENT' (with base_url the resource's endpoint)"
)


def make_model(
    spec: str,
    *,
    base_url: str | None = None,
    secrets: SecretStore | None = None,
    api_key: str | None = None,
) -> Model:
    """The model `spec` names: ``openai:NAME``, ``anthropic:NAME`` or ``azure:DEPLOYMENT``.

    `base_url` overrides the provider's default (``OPENAI_BASE_URL`` or
    ``ANTHROPIC_BASE_URL`` when set, else ``https://api.openai.com/v1``,
    ``https://api.anthropic.com``); for Azure it is the resource's endpoint
    (``https://NAME.openai.azure.com``) and required. Raises ValueError listing
    the accepted forms for any other spec.
    """
    kind, colon, name = spec.partition(":")
    if not colon or not name.strip() or kind not in ("openai", "anthropic", "azure"):
        raise ValueError(f"unknown model {spec!r}: {_FORMS}")
    name = name.strip()
    if kind == "azure":
        if not base_url:
            raise ValueError(
                f"model {spec!r} needs the Azure OpenAI endpoint as the base URL"
                " (https://NAME.openai.azure.com)"
            )
        key = _find_key(api_key, AZURE_KEY_ENV, AZURE_KEY_SECRET, secrets)
        return AzureOpenAIModel(base_url, name, api_key=key)
    if base_url is None:
        base_url = os.environ.get(f"{kind.upper()}_BASE_URL", "").strip() or None
    if kind == "openai":
        key = _find_key(api_key, OPENAI_KEY_ENV, OPENAI_KEY_SECRET, secrets)
        if base_url is None:
            return OpenAIModel(name, api_key=key)
        return OpenAIModel(name, base_url, api_key=key)
    key = _find_key(api_key, ANTHROPIC_KEY_ENV, ANTHROPIC_KEY_SECRET, secrets)
    if base_url is None:
        return AnthropicModel(name, api_key=key)
    return AnthropicModel(name, base_url, api_key=key)


def _find_key(
    explicit: str | None, env: str, secret: str, secrets: SecretStore | None
) -> str | None:
    # Stripped because a key pasted into a file or variable often ends in a newline,
    # which would make every request fail with a confusing 401.
    for candidate in (
        explicit,
        os.environ.get(env),
        secrets.get(secret) if secrets is not None else None,
    ):
        if candidate and candidate.strip():
            return candidate.strip()
    return None

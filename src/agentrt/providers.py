"""Real language models over HTTP: OpenAI-compatible APIs and the Anthropic API.

The public names of `agentrt.models.providers`, where the code lives."""

from __future__ import annotations

from .models.providers import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from .models.providers import AnthropicModel as AnthropicModel
from .models.providers import AzureOpenAIModel as AzureOpenAIModel
from .models.providers import ConfiguredModel as ConfiguredModel
from .models.providers import ModelAuthError as ModelAuthError
from .models.providers import ModelConnectError as ModelConnectError
from .models.providers import ModelMaxTokensError as ModelMaxTokensError
from .models.providers import ModelNotFoundError as ModelNotFoundError
from .models.providers import ModelOptions as ModelOptions
from .models.providers import ModelRateLimitError as ModelRateLimitError
from .models.providers import ModelRequestError as ModelRequestError
from .models.providers import ModelServerError as ModelServerError
from .models.providers import ModelStreamCutError as ModelStreamCutError
from .models.providers import ModelStreamError as ModelStreamError
from .models.providers import ModelTimeoutError as ModelTimeoutError
from .models.providers import OpenAIModel as OpenAIModel
from .models.providers import ProviderError as ProviderError
from .models.providers import RetryPolicy as RetryPolicy
from .models.providers import make_model as make_model

__all__ = [
    "DEFAULT_TIMEOUT",
    "AnthropicModel",
    "AzureOpenAIModel",
    "ConfiguredModel",
    "ModelAuthError",
    "ModelConnectError",
    "ModelMaxTokensError",
    "ModelNotFoundError",
    "ModelOptions",
    "ModelRateLimitError",
    "ModelRequestError",
    "ModelServerError",
    "ModelStreamCutError",
    "ModelStreamError",
    "ModelTimeoutError",
    "OpenAIModel",
    "ProviderError",
    "RetryPolicy",
    "make_model",
]

"""Chat-service front-ends: Telegram (origin ``tg-``) and Discord (origin ``dc-``).

Each bot is a service started with ``await nursery.start(bot.run)``;
`run_bots` starts the ones named, configured from the environment, for the
daemon.
"""

from __future__ import annotations

from .._retry import RetryPolicy as RetryPolicy
from .._settings import ConfigError as ConfigError
from ._bridge import Button as Button
from ._bridge import ButtonReply as ButtonReply
from ._bridge import ChatBridge as ChatBridge
from ._bridge import ChatOutput as ChatOutput
from ._bridge import ChatTransport as ChatTransport
from ._bridge import DeliveryError as DeliveryError
from ._service import run_bots as run_bots
from .discord import DiscordBot as DiscordBot
from .discord import DiscordConfig as DiscordConfig
from .telegram import TelegramBot as TelegramBot
from .telegram import TelegramConfig as TelegramConfig

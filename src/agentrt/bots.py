"""Chat-service front-ends: Telegram (origin ``tg-``) and Discord (origin ``dc-``).

Each bot is a service started with ``await nursery.start(bot.run)``;
`run_bots` starts the ones named, configured from the environment, for the
daemon.
"""

from __future__ import annotations

from .config.retry import RetryPolicy as RetryPolicy
from .config.settings import ConfigError as ConfigError
from .frontends.chats.conversation import Button as Button
from .frontends.chats.conversation import ButtonReply as ButtonReply
from .frontends.chats.conversation import ChatBridge as ChatBridge
from .frontends.chats.conversation import ChatOutput as ChatOutput
from .frontends.chats.conversation import ChatTransport as ChatTransport
from .frontends.chats.conversation import DeliveryError as DeliveryError
from .frontends.chats.discord import DiscordBot as DiscordBot
from .frontends.chats.discord import DiscordConfig as DiscordConfig
from .frontends.chats.service import run_bots as run_bots
from .frontends.chats.telegram import TelegramBot as TelegramBot
from .frontends.chats.telegram import TelegramConfig as TelegramConfig

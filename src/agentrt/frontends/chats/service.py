"""Starting the configured bots together, as the daemon does."""

from __future__ import annotations

import os
from collections.abc import Mapping

import trio

from ...config.settings import ConfigError
from ...core.executor import Executor
from .discord import DiscordBot
from .discord import DiscordConfig
from .telegram import TelegramBot
from .telegram import TelegramConfig


async def run_bots(
    executor: Executor,
    *,
    telegram: bool = False,
    discord: bool = False,
    environ: Mapping[str, str] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the named bots, configured from `environ` (default `os.environ`), until cancelled.

    Reports ready once every bot is listening. Raises `ConfigError` (before
    reporting ready) when a bot's token is missing or refused.
    """
    env = os.environ if environ is None else environ
    bots: list[TelegramBot | DiscordBot] = []
    # Read every configuration first: a missing token fails before anything connects.
    if telegram:
        bots.append(TelegramBot(TelegramConfig.from_env(env), executor))
    if discord:
        bots.append(DiscordBot(DiscordConfig.from_env(env), executor))
    try:
        async with trio.open_nursery() as nursery:
            for bot in bots:
                await nursery.start(bot.run)
            task_status.started()
    except BaseExceptionGroup as group:
        # A refused token is a configuration error the caller reports as such.
        matched, rest = group.split(ConfigError)
        if matched is not None and rest is None:
            raise _first(matched) from None
        raise


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first

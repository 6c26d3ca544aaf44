"""Starting the configured bots together, as the daemon does."""

from __future__ import annotations

import os
from collections.abc import Mapping

import trio

from .._executor import Executor
from .discord import DiscordBot, DiscordConfig
from .telegram import TelegramBot, TelegramConfig


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
    async with trio.open_nursery() as nursery:
        if telegram:
            await nursery.start(TelegramBot(TelegramConfig.from_env(env), executor).run)
        if discord:
            await nursery.start(DiscordBot(DiscordConfig.from_env(env), executor).run)
        task_status.started()

"""Retention: the setting and its sources, the prunes of a running daemon, pending tasks kept."""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from agentrt import Runtime
from agentrt import TaskStore
from agentrt import open_runtime
from agentrt.config.settings import ConfigError
from agentrt.config.settings import SourceKind
from agentrt.config.settings import load_settings
from agentrt.store.retention import DAY
from agentrt.store.retention import Retention

from .cli_process import read_past
from .conftest import Recorder
from .conftest import write_config


def _home(tmp_path: Path) -> dict[str, str]:
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "AGENTRT_STATE_DIR": str(tmp_path / "state"),
    }


def test_retention_days_comes_from_flag_env_or_file_and_keeps_everything_by_default(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    default = load_settings(argparse.Namespace(), home).retention_days
    assert default.value is None and default.source.kind is SourceKind.DEFAULT
    path = write_config(home, "model = 'scripted'\nretention_days = 30\n")
    from_file = load_settings(argparse.Namespace(), home).retention_days
    assert (from_file.value, str(from_file.source)) == (30, f"file {path}:2")
    env = {**home, "AGENTRT_RETENTION_DAYS": "7"}
    from_env = load_settings(argparse.Namespace(), env).retention_days
    assert (from_env.value, str(from_env.source)) == (7, "env AGENTRT_RETENTION_DAYS")
    from_flag = load_settings(argparse.Namespace(retention_days=2), env).retention_days
    assert (from_flag.value, str(from_flag.source)) == (2, "flag --retention-days")


def test_a_retention_that_is_not_a_positive_whole_number_is_refused_naming_where(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    with pytest.raises(ConfigError, match="env AGENTRT_RETENTION_DAYS: must be a positive"):
        load_settings(argparse.Namespace(), {**home, "AGENTRT_RETENTION_DAYS": "soon"})
    with pytest.raises(ConfigError, match="flag --retention-days: must be a positive integer"):
        load_settings(argparse.Namespace(retention_days=0), home)
    path = write_config(home, "retention_days = 1.5\n")
    with pytest.raises(ConfigError, match=rf"{path}:1: retention_days: must be a positive"):
        load_settings(argparse.Namespace(), home)


async def test_the_daemon_prunes_at_start_and_then_every_interval_but_never_a_pending_task(
    runtime: Runtime, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    executor = runtime.executor
    for session, text in (("cli-a", "hello"), ("cli-b", "hi"), ("cli-p", "ask Colour?")):
        await executor.run(session, text, owner="o", emit=Recorder())
    # The wall clock the store's times are read against moves with Trio's (mock) clock.
    started = trio.current_time()
    retention = Retention(
        runtime.store,
        days=1,
        every=3600,
        clock=lambda: time.time() + (trio.current_time() - started),
    )
    await nursery.start(retention.run)
    assert retention.statistics().passes == 1  # at start, before anything else
    await retention.wait_passes(2)
    assert trio.current_time() - started == 3600
    assert retention.statistics().pruned == 0  # an hour old: kept
    await retention.wait_passes(26)  # a day and more later
    assert retention.statistics().pruned == 2
    left = [s.session_id for s in (await runtime.store.sessions()).items]
    assert left == ["cli-p"]  # its pending task keeps it, however old
    assert await runtime.store.load("cli-p") is not None


async def test_a_prune_the_store_fails_is_logged_and_the_next_one_still_runs(
    tmp_path: Path, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    store = await TaskStore.open(tmp_path / "tasks.db")
    retention = Retention(store, days=1, every=60)
    await nursery.start(retention.run)
    await store.aclose()  # from now on every call fails with StoreError
    await retention.wait_passes(3)
    assert retention.statistics().pruned == 0


def test_retention_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive number of days"):
        Retention(None, days=0)  # type: ignore[arg-type]


def _age_every_session(db_path: Path, seconds: float) -> None:
    db = sqlite3.connect(db_path)
    try:
        db.execute("UPDATE sessions SET updated_at = updated_at - ?", (seconds,))
        db.commit()
    finally:
        db.close()


@pytest.mark.deadline(60)
async def test_a_daemon_started_with_retention_days_prunes_before_it_listens(
    short_dir: Path,
) -> None:
    state = short_dir / "state"
    async with open_runtime(state) as rt:
        await rt.executor.run("cli-old", "hello", owner="o", emit=Recorder())
        await rt.executor.run("cli-new", "hello", owner="o", emit=Recorder())
        await rt.executor.run("cli-parked", "ask Colour?", owner="o", emit=Recorder())
    _age_every_session(state / "tasks.db", 3 * DAY)
    db = sqlite3.connect(state / "tasks.db")
    db.execute("UPDATE sessions SET updated_at = ? WHERE session_id = 'cli-new'", (time.time(),))
    db.commit()
    db.close()
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "agentrt.daemon",
            "--socket",
            str(short_dir / "run" / "d.sock"),
            "--state-dir",
            str(state),
            "--retention-days",
            "2",
        ],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert process.stderr is not None
        with trio.fail_after(30):
            await read_past(process.stderr, b"listening on")
        db = sqlite3.connect(state / "tasks.db")
        try:
            left = {r[0] for r in db.execute("SELECT session_id FROM sessions")}
        finally:
            db.close()
        assert left == {"cli-new", "cli-parked"}
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()


def test_config_show_says_where_the_retention_came_from(tmp_path: Path) -> None:
    env = {**os.environ, **_home(tmp_path), "AGENTRT_RETENTION_DAYS": "7"}

    def show(*flags: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "agentrt", "config", "show", "--json", *flags],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=True,
        )
        shown: dict[str, Any] = json.loads(done.stdout)["retention_days"]
        return shown

    assert show() == {"value": 7, "source": "env", "where": "AGENTRT_RETENTION_DAYS"}
    assert show("--retention-days", "3") == {
        "value": 3,
        "source": "flag",
        "where": "--retention-days",
    }
    text = subprocess.run(
        [sys.executable, "-m", "agentrt", "config", "show"],
        capture_output=True,
        text=True,
        env={k: v for k, v in env.items() if k != "AGENTRT_RETENTION_DAYS"},
        timeout=30,
        check=True,
    ).stdout
    assert re.search(r"^retention_days\s+\(not set\)\s+default$", text, re.MULTILINE), text

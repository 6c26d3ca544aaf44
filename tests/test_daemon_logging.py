"""No secret reaches the daemon's log, whatever logger writes it and at any verbosity."""

from __future__ import annotations

import base64
import io
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from agentrt import SecretStore
from agentrt.agent.guard import Redactor
from agentrt.daemon import SecretFilter
from agentrt.frontends.terminal.logs import environment_secrets
from agentrt.http import load_or_create_token

from .fakes.telegram_server import TOKEN
from .fakes.telegram_server import FakeTelegram

STORED = "sk-stored-canary-0123456789"
API_KEY = "sk-env-canary-9876543210"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state_dir = tmp_path / "state"
    load_or_create_token(state_dir)
    SecretStore(state_dir / "secrets").put("api_token", STORED)
    return state_dir


@pytest.fixture
def scrubbed(state: Path) -> Iterator[tuple[logging.Logger, io.StringIO, SecretFilter]]:
    env = {"AGENTRT_TELEGRAM_TOKEN": TOKEN, "OPENAI_API_KEY": API_KEY, "HOME": "/home/ada"}
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    secret_filter = SecretFilter(
        partial(environment_secrets, env),
        Redactor(state / "secrets", {"http-token": state / "http-token"}).values,
    )
    handler.addFilter(secret_filter)
    # A child logger with no filter of its own: the handler's filter must still apply.
    logger = logging.getLogger("test.scrubbed.child")
    parent = logging.getLogger("test.scrubbed")
    parent.addHandler(handler)
    parent.setLevel(logging.DEBUG)
    try:
        yield logger, out, secret_filter
    finally:
        parent.removeHandler(handler)


def test_tokens_keys_and_stored_secrets_are_replaced_in_messages_and_tracebacks(
    state: Path, scrubbed: tuple[logging.Logger, io.StringIO, SecretFilter]
) -> None:
    logger, out, _ = scrubbed
    http_token = load_or_create_token(state)
    logger.info('HTTP Request: POST %s "HTTP/1.1 200 OK"', f"https://x/bot{TOKEN}/getUpdates")
    logger.info("quoted in a URL: %s", "https://x/?t=123456%3ATEST-token")
    logger.warning("the key was %s and the token %s", API_KEY, http_token)
    try:
        raise RuntimeError(f"a library quoted {STORED}")
    except RuntimeError:
        logger.exception("a request failed")
    record = logger.makeRecord(
        logger.name, logging.ERROR, __file__, 1, "stack", (), None, sinfo=f"at {STORED}"
    )
    logger.handle(record)
    text = out.getvalue()
    for secret in (TOKEN, "123456%3ATEST-token", API_KEY, http_token, STORED):
        assert secret not in text, f"{secret!r} reached the log:\n{text}"
    assert "bot[secret AGENTRT_TELEGRAM_TOKEN]/getUpdates" in text
    assert "the key was [secret OPENAI_API_KEY] and the token [secret http-token]" in text
    assert "RuntimeError: a library quoted [secret api_token]" in text
    assert "at [secret api_token]" in text


def test_a_secret_stored_while_running_is_replaced_from_then_on(
    state: Path, scrubbed: tuple[logging.Logger, io.StringIO, SecretFilter]
) -> None:
    logger, out, _ = scrubbed
    SecretStore(state / "secrets").put("late", "stored-after-start-42")
    logger.info("now: %s", "stored-after-start-42")
    assert out.getvalue().strip() == "test.scrubbed.child: now: [secret late]"


def test_a_stored_secret_encoded_or_wrapped_is_replaced_in_a_log_line(state: Path) -> None:
    secret_filter = SecretFilter(redactor=Redactor.for_state_dir(state))
    encoded = base64.b64encode(b"x" + STORED.encode()).decode()
    shown = secret_filter.redact(f"body={encoded} hex={STORED.encode().hex().upper()}")
    assert STORED not in shown and encoded[2:-2] not in shown
    assert shown.count("[secret api_token]") == 2


def test_an_unknown_telegram_token_in_a_url_is_replaced_too() -> None:
    secret_filter = SecretFilter()
    shown = secret_filter.redact("POST https://api.telegram.org/bot987:AAbb-cc_DD/sendMessage")
    assert shown == "POST https://api.telegram.org/bot[secret telegram token]/sendMessage"


def test_a_broken_format_string_is_logged_without_its_arguments(
    scrubbed: tuple[logging.Logger, io.StringIO, SecretFilter],
) -> None:
    logger, out, _ = scrubbed
    logger.info("two %s %s but one argument", API_KEY)
    assert out.getvalue().strip() == (
        "test.scrubbed.child: two %s %s but one argument (its arguments could not be formatted)"
    )


def test_an_uncaught_error_is_logged_scrubbed(state: Path) -> None:
    code = (
        "import sys; from pathlib import Path;"
        "from agentrt.frontends.terminal.logs import configure_logging;"
        "configure_logging(Path(sys.argv[1]), verbose=False);"
        f"raise RuntimeError('crashed holding {STORED}')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(state)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    assert STORED not in done.stderr
    assert "RuntimeError: crashed holding [secret api_token]" in done.stderr


@pytest.mark.e2e
async def test_verbose_daemon_with_telegram_and_http_logs_no_token(
    state: Path, tmp_path: Path, nursery: trio.Nursery
) -> None:
    server = FakeTelegram()
    await nursery.start(server.run)
    env = {
        **os.environ,
        "AGENTRT_TELEGRAM_TOKEN": TOKEN,
        "AGENTRT_TELEGRAM_ALLOW": "42",
        "AGENTRT_TELEGRAM_API": server.base_url,
        "OPENAI_API_KEY": API_KEY,
    }
    log_path = tmp_path / "daemon.log"
    argv = [sys.executable, "-m", "agentrt.daemon", "-v", "--socket", str(tmp_path / "d.sock")]
    argv += ["--state-dir", str(state), "--workdir", str(tmp_path), "--telegram"]
    argv += ["--http", "127.0.0.1:0"]
    with log_path.open("wb") as log_file:
        process = await trio.lowlevel.open_process(argv, env=env, stderr=log_file)
    try:
        with trio.fail_after(30):
            server.user_says(42, 42, "hello from the chat")
            await server.wait_for(lambda: any("hello from" in t for t in server.texts(42)))
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    said = log_path.read_text()
    assert "/getUpdates" in said, f"httpx's request log is not there to test:\n{said}"
    assert "bot[secret AGENTRT_TELEGRAM_TOKEN]/sendMessage" in said
    for secret in (TOKEN, load_or_create_token(state), STORED, API_KEY):
        assert said.count(secret) == 0, f"{secret!r} is in the daemon's log:\n{said}"

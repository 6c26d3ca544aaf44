"""The web chat page in a real headless Chromium, against a real server on loopback."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio

from agentrt._runtime import Runtime, open_runtime
from agentrt._scripted import ScriptedModel
from agentrt.http import load_or_create_token, serve_http

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Playwright's bound on every wait for the page (milliseconds).
PAGE_TIMEOUT_MS = 20_000


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    (tmp_path / "work").mkdir()
    async with open_runtime(
        tmp_path / "state",
        # Streamed words are paced so a Stop lands while the reply is still streaming.
        model=ScriptedModel(word_delay=0, stream_delay=0.02),
        workdir=tmp_path / "work",
        restricted_paths=[],
    ) as rt:
        yield rt


def drive_the_page(base: str, token: str, workdir: Path) -> str:
    """Chat, confirm, answer a saved question, pause and resume, as a user would."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            expect.set_options(timeout=PAGE_TIMEOUT_MS)
            page.goto(f"{base}/login?token={token}")
            assert page.url == f"{base}/", f"login did not land on the page: {page.url}"
            expect(page.locator("#conn")).to_have_text("live")

            # A chat that needs a confirmation and asks a question.
            page.fill("#input", "write a.txt hi; ask Your name?")
            page.click("#send")
            confirm = page.locator(".question[data-kind=confirm]")
            expect(confirm.locator(".prompt")).to_contain_text("write 2 bytes to")
            session = page.locator("#session-title").inner_text()
            assert session.startswith("chat-"), session
            waits = page.locator(f"#sessions li[data-session='{session}'] .waiting")
            expect(waits).to_contain_text("waits on web: confirm")
            confirm.get_by_role("button", name="Allow", exact=True).click()
            expect(confirm).to_have_count(0)

            # ask_user from a chat session parks the run on a saved question.
            expect(page.locator("#saved")).to_be_visible()
            expect(page.locator("#saved-prompt")).to_have_text("Your name?")
            expect(page.locator("#log .msg.status").last).to_have_text(
                "waiting for your answer: Your name?"
            )
            assert (workdir / "a.txt").read_text() == "hi", "the confirmed write did not happen"
            parked = page.locator(f"#sessions li[data-session='{session}']")
            expect(parked).to_have_attribute("data-status", "awaiting_answer")

            # Answering resumes it as a new turn, which finishes.
            page.fill("#saved-answer", "Ada")
            page.click("#saved-submit")
            expect(page.locator("#log .msg.status").last).to_have_text("finished")
            expect(page.locator("#log .msg.assistant").last).to_contain_text("You answered: Ada")
            expect(page.locator("#saved")).to_be_hidden()
            expect(parked).to_have_count(0)

            # Stop -> Pause keeps the task pending and listed; Resume continues it.
            page.click("#new-chat")
            page.fill("#input", "stream 300")
            page.click("#send")
            reply = page.locator("#log .msg.assistant").last
            expect(reply).to_contain_text("word3")
            second = page.locator("#session-title").inner_text()
            page.click("#stop")
            expect(page.locator("#stop-dialog")).to_be_visible()
            page.click("#stop-pause")
            expect(page.locator("#log .msg.status").last).to_contain_text("stopped (pause)")
            streamed = reply.inner_text()
            assert "word300" not in streamed, "the run finished before Pause reached it"
            paused = page.locator(f"#sessions li[data-session='{second}']")
            expect(paused).to_have_attribute("data-status", "interrupted")
            expect(paused.locator(".status")).to_have_text("interrupted (pause)")
            expect(page.locator("#paused")).to_be_visible()
            paused.locator("button.resume").click()
            expect(page.locator("#log .msg.status").last).to_have_text("finished")
            expect(page.locator("#log .msg.assistant").last).to_contain_text("word300")
            expect(paused).to_have_count(0)
            version = browser.version
        finally:
            browser.close()
    return (
        f"chromium {version}: confirmation allowed in the page, run parked on 'Your name?', "
        f"answer resumed it to 'finished' ({session}); Pause kept {second} pending "
        f"(stopped after {len(streamed.split())} of 300 words), Resume finished it"
    )


@pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason=f"{CHROMIUM} is not installed")
async def test_chat_confirm_answer_saved_question_then_pause_and_resume_in_a_real_browser(
    runtime: Runtime, tmp_path: Path
) -> None:
    pytest.importorskip("playwright")
    token = load_or_create_token(runtime.state_dir)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
        with trio.fail_after(120):
            summary = await trio.to_thread.run_sync(
                drive_the_page,
                f"http://127.0.0.1:{port}",
                token,
                tmp_path / "work",
                abandon_on_cancel=True,
            )
        nursery.cancel_scope.cancel()
    print(f"browser: {summary}")
    assert await runtime.store.list() == [], "a pending task was left behind"

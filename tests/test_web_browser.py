"""The web chat page in a real headless Chromium, against a real server on loopback."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import trio

from agentrt import Runtime
from agentrt.http import load_or_create_token
from agentrt.http import serve_http

from .browser import CHROMIUM
from .browser import CHROMIUM_ARGS
from .browser import PAGE_TIMEOUT_MS
from .conftest import scripted_runtime
from .fakes.other_origin import OtherOrigin

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.e2e


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    (tmp_path / "work").mkdir()
    # Streamed words are paced so a Stop lands while the reply is still streaming.
    async with scripted_runtime(tmp_path / "state", tmp_path / "work", stream_delay=0.02) as rt:
        yield rt


def log_in(page: Page, base: str, token: str) -> None:
    """Open the page and log in as a person does: paste the token into its form."""
    from playwright.sync_api import expect

    page.goto(f"{base}/")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", "not the token")
    page.click("#log-in")
    expect(page.locator("#login-error")).to_contain_text("not this server's")
    page.fill("#token", token)
    page.click("#log-in")
    expect(page.locator("#login")).to_be_hidden()
    expect(page.locator("#conn")).to_have_text("live")


def drive_the_page(base: str, token: str, workdir: Path) -> str:
    """Chat, confirm, answer a saved question, pause and resume, as a user would."""
    from playwright.sync_api import expect
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            expect.set_options(timeout=PAGE_TIMEOUT_MS)
            log_in(page, base, token)

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

            # Answering resumes it as a new turn, which finishes. The answer names the
            # question shown, so it can never land on one saved after it.
            shown_id = page.locator("#saved-form").get_attribute("data-question")
            assert shown_id is not None and re.fullmatch(r"q-[0-9a-f]{12}", shown_id), shown_id
            page.fill("#saved-answer", "Ada")
            with page.expect_request(lambda r: r.url.endswith("/task/resume")) as sent:
                page.click("#saved-submit")
            body = json.loads(sent.value.post_data or "{}")
            assert body == {"answer": "Ada", "question_id": shown_id}, body
            expect(page.locator("#log .msg.status").last).to_have_text("finished")
            expect(page.locator("#log .msg.assistant").last).to_contain_text("You answered: Ada")
            expect(page.locator("#saved")).to_be_hidden()
            # Finished, it stays listed (its conversation is kept), with nothing to resume.
            expect(parked).to_have_attribute("data-status", "")
            expect(parked.locator(".status")).to_have_text("finished")
            expect(parked.locator("button:not(.sid)")).to_have_count(0)

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
            expect(paused).to_have_attribute("data-status", "")
            expect(paused.locator("button.resume")).to_have_count(0)
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


def _attacker_page(target: str) -> str:
    """A neighbour's page: frames ours, and calls our API with whatever the browser adds."""
    return f"""<!doctype html><title>a neighbour</title>
<iframe id="framed" src="{target}/" width="600" height="300"></iframe>
<img src="/pixel.png" alt="">
<script>
window.storage = {{
  session: sessionStorage.length, local: localStorage.length, cookie: document.cookie,
}};
Promise.allSettled([
  fetch("/probe", {{credentials: "include"}}),
  fetch("{target}/v1/session/attack/run", {{
    method: "POST", mode: "no-cors", credentials: "include",
    body: JSON.stringify({{text: "sh id > pwned.txt"}}),
  }}),
  fetch("{target}/v1/sessions", {{credentials: "include"}}).then((r) => r.status),
]).then((results) => {{ window.results = results.map((r) => r.status); window.done = true; }});
</script>"""


def visit_a_neighbour_after_logging_in(
    base: str, token: str, neighbour: str, rebound: str
) -> dict[str, object]:
    """Log into our page, then open a page on another port and a DNS-rebound name."""
    from playwright.sync_api import expect
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            # The rebinding attacker's name resolves to loopback, as its DNS would make it.
            args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP rebind.test 127.0.0.1"],
            headless=True,
        )
        try:
            context = browser.new_context()
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            expect.set_options(timeout=PAGE_TIMEOUT_MS)
            ours = context.new_page()
            log_in(ours, base, token)
            cookies = context.cookies()

            theirs = context.new_page()
            theirs.goto(f"{neighbour}/")
            theirs.wait_for_function("window.done === true")
            storage = theirs.evaluate("window.storage")
            framed = theirs.frame_locator("#framed")
            expect(framed.locator("#login-form")).to_have_count(0)
            framed_url = next(f.url for f in theirs.frames if f is not theirs.main_frame)

            rebinding = context.new_page()
            rebound_response = rebinding.goto(f"{rebound}/")
            assert rebound_response is not None
            rebound_status = rebound_response.status
            rebound_text = rebinding.locator("body").inner_text()

            # Our page is still logged in and live in its own tab.
            expect(ours.locator("#conn")).to_have_text("live")
            version = browser.version
        finally:
            browser.close()
    return {
        "cookies": cookies,
        "storage": storage,
        "framed_url": framed_url,
        "rebound_status": rebound_status,
        "rebound_text": rebound_text,
        "version": version,
    }


@pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason=f"{CHROMIUM} is not installed")
async def test_a_page_on_another_port_gets_no_credential_and_cannot_act_for_the_user(
    runtime: Runtime, tmp_path: Path
) -> None:
    pytest.importorskip("playwright")
    token = load_or_create_token(runtime.state_dir)
    other = OtherOrigin()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, runtime, "127.0.0.1", 0, token=token))
        base = f"http://127.0.0.1:{port}"
        await nursery.start(other.run)
        other.page_html = _attacker_page(base)
        with trio.fail_after(120):
            seen = await trio.to_thread.run_sync(
                visit_a_neighbour_after_logging_in,
                base,
                token,
                other.base_url,
                f"http://rebind.test:{port}",
                abandon_on_cancel=True,
            )
        # The neighbour replays everything the browser sent it, against our API.
        probe = next(s for s in other.seen if s.path == "/probe")
        replayed = {k: v for k, v in probe.headers.items() if k not in ("host", "content-length")}
        async with httpx.AsyncClient(base_url=base) as attacker:
            replay = await attacker.post(
                "/v1/session/replay/run", json={"text": "sh id"}, headers=replayed
            )
        nursery.cancel_scope.cancel()

    # Nothing the browser sent the neighbour could stand for the user.
    assert other.seen, "the neighbour's page was not visited"
    for request in other.seen:
        assert "cookie" not in request.headers, request
        assert "authorization" not in request.headers, request
        assert token not in repr(request.headers), request
    assert seen["cookies"] == [], "the page set a cookie"
    # The token lives in storage of our origin only: the neighbour's page sees none of it.
    assert seen["storage"] == {"session": 0, "local": 0, "cookie": ""}
    # A replay without the bearer token is refused, and nothing ran.
    assert replay.status_code == 401, replay.text
    assert replay.json()["error"]["code"] == "missing_token"
    assert await runtime.store.load("chat-replay") is None
    assert await runtime.store.load("chat-attack") is None
    assert not (tmp_path / "work" / "pwned.txt").exists()
    # Our page refuses to be framed, and a DNS-rebound name is refused.
    assert seen["framed_url"] in ("chrome-error://chromewebdata/", "about:blank"), seen
    assert seen["rebound_status"] == 421
    assert "bad_host" in str(seen["rebound_text"])
    print(
        f"browser: chromium {seen['version']}: logged in on port {port}; the page on port "
        f"{other.port} got {len(other.seen)} requests with no Cookie or Authorization; "
        f"replaying them -> {replay.status_code}; framing blocked; rebound Host -> 421"
    )

"""The web chat page as people use it, in Debian's Chromium at a desktop's and a phone's width.

Layout from 320 px up, the run's state under the races a real network makes,
Markdown replies, dark mode, Esc, what a screen reader hears, and the session
list. Each race is made to happen every time: the answer to the page's own
request is held back (Playwright's routing) until the server's events about
the same run have reached the page.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest
import trio

from agentrt import Runtime
from agentrt import open_runtime
from agentrt.agent.compaction import ContextLimits
from agentrt.frontends.http.frontend import EVENT_RING
from agentrt.models.providers import OpenAIModel
from agentrt.vocab.usage import TokenCount

from .browser import DESKTOP
from .browser import NARROW
from .browser import PHONE
from .browser import Site
from .browser import in_browser
from .browser import needs_chromium
from .conftest import scripted_runtime

if TYPE_CHECKING:
    from playwright.sync_api import APIResponse
    from playwright.sync_api import Page
    from playwright.sync_api import Route

pytestmark = [pytest.mark.e2e, needs_chromium]

WIDTHS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280px", "375px"])


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    (tmp_path / "work").mkdir()
    # Streamed words are paced so a stop lands while the reply is still streaming.
    async with scripted_runtime(tmp_path / "state", tmp_path / "work", stream_delay=0.02) as rt:
        yield rt


# -- helpers the scenarios share ---------------------------------------------------


def send(page: Page, text: str) -> None:
    page.fill("#input", text)
    page.click("#send")


def send_and_wait(page: Page, text: str) -> None:
    """Send `text` and wait for its run to end (Send is disabled from the click until then)."""
    from playwright.sync_api import expect

    send(page, text)
    expect(page.locator("#send")).to_be_enabled()


def wait_until_answered(page: Page) -> None:
    """Until the page has handled the answer to its run (or resume) request."""
    from playwright.sync_api import expect

    expect(page.locator("#composer")).to_have_attribute("aria-busy", "false")


def last_status(page: Page) -> Any:
    return page.locator("#log .msg.status").last


def open_sessions(page: Page) -> None:
    """Show the session list (on a phone it is folded away behind its button)."""
    from playwright.sync_api import expect

    toggle = page.locator("#toggle-sidebar")
    if toggle.get_attribute("aria-expanded") != "true":
        toggle.click()
    expect(page.locator("#sidebar")).to_be_visible()


class HeldRuns:
    """Sends each run request to the server, but holds its answer back from the page."""

    def __init__(self, page: Page) -> None:
        self.held: list[tuple[Route, APIResponse]] = []
        page.route("**/v1/session/*/run", self._hold)

    def _hold(self, route: Route) -> None:
        self.held.append((route, route.fetch()))

    def release(self) -> None:
        for route, response in self.held:
            route.fulfill(response=response)
        self.held.clear()


def message_kinds(page: Page) -> list[str]:
    kinds: list[str] = page.eval_on_selector_all("#log .msg", "els => els.map(e => e.classList[1])")
    return kinds


# -- 1. from 320 px up -----------------------------------------------------------------


LONG_WORD = "x" * 400
LONG_CODE = "```\n" + "y = " + "1 + " * 120 + "1\n```"


def measure(page: Page) -> dict[str, float]:
    sizes: dict[str, float] = page.evaluate(
        """() => ({
            inner: window.innerWidth,
            scroll: document.documentElement.scrollWidth,
            main: document.querySelector('main').getBoundingClientRect().width,
            sidebar: document.querySelector('#sidebar').getBoundingClientRect().width,
        })"""
    )
    return sizes


def use_the_layout(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    width = page.viewport_size["width"] if page.viewport_size else 0
    phone = width < 700
    sidebar = page.locator("#sidebar")
    if phone:
        # The chat takes the whole width; the sessions are one tap away.
        expect(sidebar).to_be_hidden()
        expect(page.locator("#toggle-sidebar")).to_have_attribute("aria-expanded", "false")
    else:
        expect(sidebar).to_be_visible()
    send_and_wait(page, LONG_WORD)
    send(page, "sh true")  # a confirmation card, with its buttons
    expect(page.locator(".question[data-kind=confirm]")).to_be_visible()
    wide_card = measure(page)
    page.locator(".question button", has_text="Deny").click()
    expect(page.locator("#send")).to_be_enabled()
    send_and_wait(page, LONG_CODE)
    expect(page.locator("#log .msg.status", has_text="finished")).to_have_count(3)
    before = measure(page)
    code = page.locator("#log .code-block pre").last
    code_scrolls = code.evaluate("el => el.scrollWidth > el.clientWidth")
    page.click("#toggle-sidebar")
    if phone:
        expect(sidebar).to_be_visible()
    else:
        expect(sidebar).to_be_hidden()
    toggled = measure(page)
    if phone:
        # Choosing a session folds the list away again.
        page.click("#new-chat")
        expect(sidebar).to_be_hidden()
    return {
        "card": wide_card,
        "before": before,
        "toggled": toggled,
        "code_scrolls": code_scrolls,
    }


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE, NARROW], ids=["1280px", "375px", "320px"])
async def test_the_chat_column_fits_the_width_and_nothing_scrolls_sideways(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, use_the_layout, viewport=viewport)
    before, toggled = seen["before"], seen["toggled"]
    width = viewport["width"]
    for sizes in (seen["card"], before, toggled):
        assert sizes["inner"] == width
        assert sizes["scroll"] <= sizes["inner"], sizes
    if width >= 1000:
        # The sessions beside the chat, then folded away to give it the whole width.
        assert 250 <= before["sidebar"] <= 300, before
        assert before["main"] == width - before["sidebar"], before
        assert toggled["main"] == width, toggled
    else:
        # The chat has the whole width; the sessions open over it, never wider than it.
        assert before["main"] == width, before
        assert toggled["main"] == width, toggled
        assert 250 <= toggled["sidebar"] <= min(300, width - 45), toggled
    # A long line of code scrolls inside its block instead of widening the page.
    assert seen["code_scrolls"] is True


# -- 3. the run's state follows the server's events -------------------------------------


def fail_at_once(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    held = HeldRuns(page)
    send(page, "fail the provider is down")
    # The run's failure reaches the page before the answer to the request that started it.
    alert = page.get_by_role("alert").filter(has_text="the provider is down")
    expect(alert).to_be_visible()
    held.release()
    wait_until_answered(page)
    expect(page.locator("#run-state")).to_have_text("")
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#send")).to_be_enabled()
    # The failed task is pending: the page offers to resume it, and Esc stops nothing.
    expect(page.locator("#paused")).to_be_visible()
    page.locator("#input").press("Escape")
    expect(page.locator("#stop-dialog")).to_be_hidden()
    return {"notice": page.locator("#notice").is_visible(), "alert": alert.inner_text()}


@WIDTHS
async def test_a_run_that_fails_at_once_shows_no_run_and_no_stop_and_says_so_as_an_alert(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, fail_at_once, viewport=viewport)
    assert seen["notice"] is False, "an error notice: the page tried to stop an ended run"
    assert seen["alert"] == (
        "failed: model error: the provider is down; the task is kept: resume it when you like"
    )


def reply_before_the_answer(page: Page, site: Site) -> list[str]:
    from playwright.sync_api import expect

    held = HeldRuns(page)
    send(page, "hello there")
    expect(page.locator("#log .msg.assistant")).to_have_text("hello there")
    held.release()
    wait_until_answered(page)
    expect(last_status(page)).to_have_text("finished")
    return message_kinds(page)


@WIDTHS
async def test_the_users_message_comes_before_the_reply_whenever_the_answer_arrives(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    kinds = await in_browser(runtime, reply_before_the_answer, viewport=viewport)
    assert kinds.index("user") < kinds.index("assistant"), kinds
    assert kinds.count("user") == 1 and kinds.count("assistant") == 1, kinds


def pause_and_resume(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "stream 250")
    expect(page.locator("#log .msg.assistant").last).to_contain_text("word3")
    page.click("#stop")
    page.click("#stop-pause")
    expect(last_status(page)).to_contain_text("stopped (pause)")
    cut = page.locator("#log .msg.assistant").last.inner_text()
    page.click("#paused-resume")
    expect(last_status(page)).to_have_text("finished")
    return {"cut": cut, "log": page.locator("#log").inner_text()}


@WIDTHS
async def test_a_resumed_reply_is_shown_once(runtime: Runtime, viewport: dict[str, int]) -> None:
    seen = await in_browser(runtime, pause_and_resume, viewport=viewport)
    assert "word250" not in seen["cut"], "the run finished before the pause reached it"
    # The reply the pause cut short was never saved: the resumed run says it again, whole.
    assert seen["log"].count("word1 word2 word3") == 1, seen["log"]
    assert "word249 word250" in seen["log"]


def send_during_a_run(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    send(page, "stream 400")
    expect(page.locator("#log .msg.assistant").last).to_contain_text("word2")
    expect(page.locator("#send")).to_be_disabled()
    page.fill("#input", "one more thing")
    page.locator("#input").press("Enter")
    page.locator("#composer").dispatch_event("submit")
    running = page.locator("#run-state").inner_text()
    page.click("#stop")
    page.click("#stop-yes")
    expect(last_status(page)).to_contain_text("stopped (user_cancel)")
    expect(page.locator("#send")).to_be_enabled()
    # What was typed meanwhile is still there, to send now.
    kept = page.locator("#input").input_value()
    page.click("#send")
    expect(page.locator("#log .msg.user").last).to_have_text("one more thing")
    expect(last_status(page)).to_have_text("finished")
    return {
        "posts": posts,
        "kept": kept,
        "running": running,
        "notice": page.locator("#notice").is_visible(),
    }


@WIDTHS
async def test_send_is_disabled_while_the_session_runs(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, send_during_a_run, viewport=viewport)
    runs = [url for url in seen["posts"] if url.endswith("/run")]
    assert len(runs) == 2, seen["posts"]  # the first message, and the one sent after it ended
    assert seen["kept"] == "one more thing"
    assert seen["running"].startswith("running (task ")
    assert seen["notice"] is False


def stop_dialog_outlived_by_its_run(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "stream 100")
    expect(page.locator("#log .msg.assistant").last).to_contain_text("word2")
    page.locator("#input").press("Escape")
    expect(page.locator("#stop-dialog")).to_be_visible()
    # The run ends while the person is still deciding: the question goes away.
    expect(last_status(page)).to_have_text("finished")
    expect(page.locator("#stop-dialog")).to_be_hidden()
    expect(page.locator("#stop")).to_be_hidden()
    return {"notice": page.locator("#notice").is_visible()}


@WIDTHS
async def test_the_stop_question_goes_away_when_its_run_ends(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, stop_dialog_outlived_by_its_run, viewport=viewport)
    assert seen["notice"] is False


def _while_the_page_is_away(site: Site, task: str, then: str | None = None) -> None:
    """Pause `task` while the page cannot hear, then (optionally) run `then` to its end."""
    import httpx

    headers = {"Authorization": f"Bearer {site.token}"}
    with (
        httpx.Client(base_url=site.direct, headers=headers, timeout=10) as client,
        client.stream("GET", "/v1/events") as events,
    ):
        lines = events.iter_lines()
        while not next(lines).startswith("data: "):
            pass  # subscribed: no end below is missed here
        stopped = client.post(f"/v1/task/{task}/cancel", json={"pause": True})
        assert stopped.status_code == 200, stopped.text
        ends = 1
        if then is not None:
            started = client.post("/v1/session/chatty/run", json={"text": then})
            assert started.status_code == 202, started.text
            ends = 2
        for line in lines:
            if line.startswith("data: ") and json.loads(line[6:])["type"] == "run_ended":
                ends -= 1
                if not ends:
                    break


def _cut_the_page_off(page: Page, site: Site, text: str) -> str:
    from playwright.sync_api import expect

    send(page, text)
    expect(page.locator("#run-state")).to_contain_text("running")
    expect(page.locator("#log .msg:not(.status):not(.user)").first).to_be_visible()
    task = page.locator("#run-state").inner_text().removeprefix("running (task ").rstrip(")")
    # The network drops, and the page's reconnection does not get through yet.
    site.cut_and_hold()
    expect(page.locator("#conn")).to_have_text("reconnecting")
    return task


def _back_and_not_running(page: Page, site: Site) -> None:
    from playwright.sync_api import expect

    site.release()
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#run-state")).to_have_text("")
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#paused")).to_be_visible()


def missed_events_are_replayed(page: Page, site: Site) -> dict[str, Any]:
    task = _cut_the_page_off(page, site, "stream 400")
    _while_the_page_is_away(site, task)
    _back_and_not_running(page, site)
    return {"statuses": page.locator("#log .msg.status").all_inner_texts()}


@WIDTHS
async def test_events_missed_while_the_stream_was_down_are_shown_once_on_reconnecting(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(
        runtime, missed_events_are_replayed, viewport=viewport, through_proxy=True
    )
    # The page reconnected with Last-Event-ID and was sent the run's end it missed, once.
    stopped = [status for status in seen["statuses"] if status.startswith("stopped (pause)")]
    assert len(stopped) == 1, seen


def missed_events_are_gone(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    task = _cut_the_page_off(page, site, "sleep 60")
    # Meanwhile another session says more than the server keeps for a reconnection.
    _while_the_page_is_away(site, task, then=f"stream {EVENT_RING + 100}")
    _back_and_not_running(page, site)
    # Told to reload, the page read the conversation afresh from the server.
    expect(page.locator("#log .msg.user")).to_have_text("sleep 60")
    return {
        "statuses": page.locator("#log .msg.status").all_inner_texts(),
        "tools": page.locator("#log .msg.tool").all_inner_texts(),
    }


@WIDTHS
async def test_when_missed_events_are_no_longer_kept_the_page_reloads_and_shows_no_ended_run(
    tmp_path: Path, viewport: dict[str, int]
) -> None:
    async with scripted_runtime(tmp_path / "state", tmp_path) as fast:
        seen = await in_browser(fast, missed_events_are_gone, viewport=viewport, through_proxy=True)
    # The page never heard the run's end: the session list, read on reconnecting, told it
    # that the run is over, and the stored conversation replaced what it had shown.
    assert seen["statuses"] == [], seen  # the stored conversation has no status lines
    assert seen["tools"] == ["→ sleep seconds=60"], seen


# -- 4. Markdown, dark mode, Esc ---------------------------------------------------------

MARKDOWN = (
    "# Plan\n\nSome **bold** text and `inline code`, a [link](https://example.org) and "
    "[another](javascript:alert(1)).\n\n```python\nprint('hello')\nx = 1 < 2\n```\n\n"
    '<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script>'
)


def read_markdown(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, MARKDOWN)
    expect(last_status(page)).to_have_text("finished")
    reply = page.locator("#log .msg.assistant").last
    block = reply.locator(".code-block")
    expect(block.locator("code")).to_have_text("print('hello')\nx = 1 < 2\n")
    block.get_by_role("button", name="Copy the code").click()
    expect(block.locator("button.copy")).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    return {
        "heading": reply.locator("h1").inner_text(),
        "bold": reply.locator("strong").inner_text(),
        "inline": reply.locator("p code").inner_text(),
        "lang": block.locator(".lang").inner_text(),
        "links": reply.locator("a").evaluate_all(
            "els => els.map(a => [a.textContent, a.getAttribute('href'), a.rel])"
        ),
        "copied": copied,
        "images": reply.locator("img").count(),
        "scripts": reply.locator("script").count(),
        "pwned": page.evaluate("window.pwned === undefined"),
        "text": reply.inner_text(),
    }


@WIDTHS
async def test_a_markdown_reply_renders_sanitised_with_a_copy_button_on_its_code(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(
        runtime,
        read_markdown,
        viewport=viewport,
        permissions=["clipboard-read", "clipboard-write"],
    )
    assert seen["heading"] == "Plan"
    assert seen["bold"] == "bold"
    assert seen["inline"] == "inline code"
    assert seen["lang"] == "python"
    assert seen["copied"] == "print('hello')\nx = 1 < 2\n"
    # A link opens apart from the page; a javascript: link is not made a link at all.
    assert seen["links"] == [["link", "https://example.org", "noopener noreferrer"]]
    # HTML in a reply is shown as text, never run.
    assert seen["images"] == 0 and seen["scripts"] == 0 and seen["pwned"] is True
    assert '<img src=x onerror="window.pwned=1">' in seen["text"]


def see_an_edit(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "edit a.txt two '<b>2</b>'")
    card = page.locator(".question[data-kind=confirm]")
    expect(card).to_be_visible()
    block = card.locator("pre.diff")
    expect(block).to_be_visible()
    rows: list[list[str]] = block.locator("span").evaluate_all(
        "els => els.map(e => [e.className, e.textContent, getComputedStyle(e).color])"
    )
    seen = {
        "rows": rows,
        "label": block.get_attribute("aria-label"),
        "prompt": card.locator(".prompt").inner_text(),
        "markup": card.locator("pre.diff b").count(),
        "sizes": measure(page),
    }
    card.locator("button", has_text="Allow").first.click()
    expect(last_status(page)).to_have_text("finished")
    return seen


@WIDTHS
async def test_an_edit_confirmation_shows_its_diff_coloured_as_text(
    runtime: Runtime, viewport: dict[str, int], tmp_path: Path
) -> None:
    target = tmp_path / "work" / "a.txt"
    target.write_text("one\ntwo\n" + "z" * 300 + "\n")
    seen = await in_browser(runtime, see_an_edit, viewport=viewport, color_scheme="light")
    assert seen["prompt"] == f"edit {target} (1 replacement)"
    assert seen["label"] == "the change"
    green, red, cyan, plain = "rgb(10, 107, 43)", "rgb(163, 0, 27)", "rgb(0, 112, 138)", ""
    rows = [[kind, text, colour] for kind, text, colour in seen["rows"]]
    assert [row[:2] for row in rows] == [
        ["file", "--- a/a.txt\n"],
        ["file", "+++ b/a.txt\n"],
        ["hunk", "@@ -1,3 +1,3 @@\n"],
        [plain, " one\n"],
        ["remove", "-two\n"],
        ["add", "+<b>2</b>\n"],
        [plain, " " + "z" * 300 + "\n"],
    ]
    assert [row[2] for row in rows[2:3] + rows[4:6]] == [cyan, red, green]
    # A long line scrolls inside the diff instead of widening the page.
    assert seen["sizes"]["scroll"] <= seen["sizes"]["inner"], seen["sizes"]
    # The new text's markup is shown as text, never made markup.
    assert seen["markup"] == 0
    assert target.read_text() == "one\n<b>2</b>\n" + "z" * 300 + "\n"


def colours(page: Page, site: Site) -> dict[str, str]:
    from playwright.sync_api import expect

    send(page, "hello")
    expect(last_status(page)).to_have_text("finished")
    found: dict[str, str] = page.evaluate(
        """() => ({
            body: getComputedStyle(document.body).backgroundColor,
            text: getComputedStyle(document.body).color,
            reply: getComputedStyle(document.querySelector('.msg.assistant')).backgroundColor,
            input: getComputedStyle(document.querySelector('#input')).backgroundColor,
        })"""
    )
    return found


def luminance(css: str) -> float:
    red, green, blue = (int(part) for part in css[css.index("(") + 1 : -1].split(",")[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


@WIDTHS
async def test_dark_mode_follows_the_systems_colour_scheme(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    light = await in_browser(runtime, colours, viewport=viewport, color_scheme="light")
    dark = await in_browser(runtime, colours, viewport=viewport, color_scheme="dark")
    for part in ("body", "reply", "input"):
        assert luminance(light[part]) > 0.85, light
        assert luminance(dark[part]) < 0.2, dark
    assert luminance(light["text"]) < 0.2 and luminance(dark["text"]) > 0.8


def esc_no_then_pause(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "stream 2000")
    reply = page.locator("#log .msg.assistant").last
    expect(reply).to_contain_text("word2")
    # Esc asks; No (the default, or Esc again) keeps the run going.
    page.locator("#input").press("Escape")
    dialog = page.locator("#stop-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#stop-no")).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(reply).to_contain_text("word5")
    page.locator("#input").press("Escape")
    page.click("#stop-no")
    expect(reply).to_contain_text("word8")
    # P in the popup pauses: the task is kept, to resume.
    page.locator("#input").press("Escape")
    # A key pressed before the question has the focus would go to the input.
    expect(page.locator("#stop-no")).to_be_focused()
    page.keyboard.press("p")
    expect(last_status(page)).to_contain_text("stopped (pause); the task is kept")
    expect(page.locator("#paused")).to_be_visible()
    session = page.locator("#session-title").inner_text()
    return {"session": session, "reply": reply.inner_text()}


def esc_yes(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "stream 400")
    expect(page.locator("#log .msg.assistant").last).to_contain_text("word2")
    page.locator("#input").press("Escape")
    page.click("#stop-yes")
    expect(last_status(page)).to_contain_text("stopped (user_cancel); the task was discarded")
    expect(page.locator("#paused")).to_be_hidden()
    return {"session": page.locator("#session-title").inner_text()}


@WIDTHS
async def test_esc_asks_yes_pause_or_no_as_in_the_terminal(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    paused = await in_browser(runtime, esc_no_then_pause, viewport=viewport)
    assert "word2000" not in paused["reply"]
    record = await runtime.store.load(paused["session"])
    assert record is not None and record.cause is not None and record.cause.value == "pause"
    stopped = await in_browser(runtime, esc_yes, viewport=viewport)
    assert await runtime.store.load(stopped["session"]) is None


def esc_before_anything_shows(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "stream 3")
    expect(page.locator("#run-state")).to_contain_text("running")
    page.locator("#input").press("Escape")
    expect(last_status(page)).to_contain_text("stopped (user_cancel)")
    return {
        "dialog_opened": page.evaluate("document.querySelector('#stop-dialog').open"),
        "session": page.locator("#session-title").inner_text(),
        "replies": page.locator("#log .msg.assistant").count(),
    }


@WIDTHS
async def test_esc_before_anything_is_shown_stops_at_once(
    tmp_path: Path, viewport: dict[str, int]
) -> None:
    # A model slow to say its first word: nothing of the run is on screen when Esc comes.
    async with scripted_runtime(tmp_path / "slow", tmp_path, stream_delay=600) as slow:
        seen = await in_browser(slow, esc_before_anything_shows, viewport=viewport)
        assert await slow.store.load(seen["session"]) is None  # a user-cancel drops it
    assert seen["dialog_opened"] is False
    assert seen["replies"] == 0


def reasoning_then_pause_and_resume(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "hi")
    thought = page.locator("#log .msg.reasoning")
    expect(thought).to_have_text("Thinking it over.")
    # Stopped while the model still thinks: the reasoning was shown, so Esc asks.
    page.locator("#input").press("Escape")
    page.click("#stop-pause")
    expect(last_status(page)).to_contain_text("stopped (pause)")
    page.click("#paused-resume")
    expect(last_status(page)).to_have_text("finished")
    return {
        "thoughts": thought.all_inner_texts(),
        "reply": page.locator("#log .msg.assistant").all_inner_texts(),
        "bold": page.locator("#log .msg.assistant strong").inner_text(),
        "style": thought.evaluate("el => getComputedStyle(el).fontStyle"),
    }


@WIDTHS
async def test_reasoning_shows_dimmed_apart_from_the_reply_and_once_after_a_resume(
    tmp_path: Path, viewport: dict[str, int]
) -> None:
    from .fakes.llm_server import OA_DONE
    from .fakes.llm_server import LLMServer
    from .fakes.llm_server import oa_finish
    from .fakes.llm_server import oa_reasoning
    from .fakes.llm_server import oa_text
    from .fakes.llm_server import sse
    from .fakes.llm_server import stall

    server = LLMServer()
    # The first answer thinks and then hangs (the person pauses it); the resumed one
    # thinks the same again and replies.
    server.script(
        stall([oa_reasoning("Thinking it over.")]),
        sse([oa_reasoning("Thinking it over."), oa_text("Hello **there**"), oa_finish(), OA_DONE]),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        model = OpenAIModel("test-model", server.base_url + "/v1", api_key="sk-test")
        async with open_runtime(
            tmp_path / "state", model=model, workdir=tmp_path, restricted_paths=[]
        ) as rt:
            seen = await in_browser(rt, reasoning_then_pause_and_resume, viewport=viewport)
        nursery.cancel_scope.cancel()
    assert seen["thoughts"] == ["Thinking it over."]
    assert seen["reply"] == ["Hello there"]
    assert seen["bold"] == "there"
    assert seen["style"] == "italic"


# -- 5. accessibility -----------------------------------------------------------------


def open_a_session_by_keyboard(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "ask Your name?")
    expect(last_status(page)).to_have_text("waiting for your answer: Your name?")
    first = page.locator("#session-title").inner_text()
    open_sessions(page)
    page.click("#new-chat")
    expect(page.locator("#session-title")).not_to_have_text(first)
    open_sessions(page)
    # From the top of the page, Tab reaches the parked session's entry; Enter opens it.
    page.evaluate("document.activeElement.blur()")
    entry = page.locator(f"#sessions li[data-session='{first}'] button.sid")
    for _ in range(40):
        page.keyboard.press("Tab")
        if entry.evaluate("el => el === document.activeElement"):
            break
    else:
        raise AssertionError("Tab never reached the session")
    page.keyboard.press("Enter")
    expect(page.locator("#session-title")).to_have_text(first)
    expect(entry).to_have_attribute("aria-current", "true")
    expect(page.locator("#saved-prompt")).to_have_text("Your name?")
    return {"sidebar_visible": page.locator("#sidebar").is_visible()}


@WIDTHS
async def test_sessions_are_reachable_and_opened_by_keyboard(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, open_a_session_by_keyboard, viewport=viewport)
    # On a phone the list folds away once a session is chosen.
    assert seen["sidebar_visible"] is (viewport["width"] >= 1000)


def listen_to_the_live_region(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    page.evaluate(
        """() => {
            window.announced = [];
            const region = document.querySelector('#announce');
            new MutationObserver(() => window.announced.push(region.textContent))
                .observe(region, {childList: true, characterData: true, subtree: true});
            window.words = 0;
            new MutationObserver(() => window.words++)
                .observe(document.querySelector('#log'),
                         {childList: true, characterData: true, subtree: true});
        }"""
    )
    send(page, "stream 30")
    expect(last_status(page)).to_have_text("finished")
    expect(page.locator("#announce")).to_have_text(" ".join(f"word{i}" for i in range(1, 31)))
    return {
        "announced": page.evaluate("window.announced"),
        "log_changes": page.evaluate("window.words"),
        "live": page.evaluate(
            """() => [...document.querySelectorAll('[aria-live], [role=log], [role=status]')]
                .map(el => el.id)"""
        ),
    }


@WIDTHS
async def test_the_live_region_announces_whole_messages_not_every_word(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, listen_to_the_live_region, viewport=viewport)
    whole = " ".join(f"word{i}" for i in range(1, 31))
    assert seen["announced"] == [whole], seen["announced"]
    assert seen["log_changes"] > 5  # the log itself changed as the words came
    # Only the announcer is live: the log and the header's run state are not.
    assert seen["live"] == ["announce"], seen["live"]


# -- 2. the session list and a reload ---------------------------------------------------


def reload_restores_the_conversation(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send_and_wait(page, "hello **there**")
    send(page, "write notes.txt hi")
    page.locator(".question button", has_text="Allow").first.click()
    expect(page.locator("#send")).to_be_enabled()
    session = page.locator("#session-title").inner_text()
    before = page.locator("#log .msg:not(.status)").all_inner_texts()
    page.goto(f"{site.base}/")  # the address without the session: the tab remembers it
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#session-title")).to_have_text(session)
    expect(page.locator("#log .msg.assistant").last).to_contain_text("write_file")
    after = page.locator("#log .msg").all_inner_texts()
    page.reload()
    expect(page.locator("#log .msg.assistant").last).to_contain_text("write_file")
    again = page.locator("#log .msg").all_inner_texts()
    open_sessions(page)
    entry = page.locator(f"#sessions li[data-session='{session}']")
    return {
        "before": before,
        "after": after,
        "again": again,
        "bold": page.locator("#log .msg.assistant strong").first.inner_text(),
        "title": entry.locator(".name").inner_text(),
        "header": page.locator("#session-name").inner_text(),
        "status": entry.locator(".status").inner_text(),
        "when": entry.locator(".when").inner_text(),
        "storage": page.evaluate("Object.keys(sessionStorage).sort()"),
        "cookies": page.context.cookies(),
    }


@WIDTHS
async def test_a_reload_keeps_the_open_session_and_restores_its_conversation(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, reload_restores_the_conversation, viewport=viewport)
    # What the page showed live is what it reads back from the server's history, in order.
    assert seen["after"] == seen["before"] == seen["again"], seen
    assert seen["after"][0] == "hello **there**"  # what the person typed, as typed
    assert seen["bold"] == "there"  # the reply, rendered
    assert any(text.startswith("→ write_file") for text in seen["after"]), seen["after"]
    # A title is plain text: the Markdown of the first line is read, not shown.
    assert seen["title"] == seen["header"] == "hello there"
    assert seen["status"] == "finished"
    assert seen["when"]
    # The session id is kept in the tab beside the token; nothing in a cookie.
    assert seen["storage"] == ["agentrt.session", "agentrt.token"]
    assert seen["cookies"] == []


def reload_on_a_server_without_history(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    asked: list[str] = []

    def no_such_route(route: Route) -> None:
        asked.append(route.request.url)
        body = {"error": {"code": "not_found", "message": "no route"}}
        route.fulfill(status=404, content_type="application/json", body=json.dumps(body))

    # A server from before the history routes: it answers them 404 not_found.
    page.route("**/v1/sessions/*/messages*", no_such_route)
    send(page, "stream 200")
    expect(page.locator("#log .msg.assistant").last).to_contain_text("word2")
    page.click("#stop")
    page.click("#stop-pause")
    expect(last_status(page)).to_contain_text("stopped (pause)")
    session = page.locator("#session-title").inner_text()
    page.reload()
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#session-title")).to_have_text(session)
    expect(page.locator("#paused")).to_be_visible()
    page.click("#paused-resume")
    expect(last_status(page)).to_have_text("finished")
    return {"asked": len(asked), "notice": page.locator("#notice").is_visible()}


@WIDTHS
async def test_without_the_history_routes_a_reload_keeps_the_session_and_carries_on(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, reload_on_a_server_without_history, viewport=viewport)
    # The page asked once for the first run's tokens, and once after the reload (the page
    # starts anew), heard each time there is no such route, and asked no more.
    assert seen["asked"] == 2
    assert seen["notice"] is False


def undo_with_a_conflict(target: Path, page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "write a.txt after")
    card = page.locator(".question[data-kind=confirm]")
    card.locator("button", has_text="Allow").first.click()
    expect(last_status(page)).to_have_text("finished")
    undo = page.locator("#undo")
    expect(undo).to_be_visible()
    # The person changes the file after the run: the undo asks before it goes on.
    target.write_text("mine\n")
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", answer)
    undo.click()
    expect(last_status(page)).to_contain_text("put back 1 file(s)")
    return {"asked": asked, "said": last_status(page).inner_text()}


@needs_chromium
async def test_the_undo_button_puts_back_the_last_runs_files_asking_about_a_changed_one(
    runtime: Runtime, tmp_path: Path
) -> None:
    target = tmp_path / "work" / "a.txt"
    target.write_text("before\n")
    seen = await in_browser(runtime, partial(undo_with_a_conflict, target), viewport=DESKTOP)
    [asked] = seen["asked"]
    assert asked.startswith(f"1 file(s) changed since the run:\n{target}\n")
    assert seen["said"] == (
        f"put back 1 file(s): {target} (its newer content kept in {target}.agentrt-undo-1)"
    )
    assert target.read_text() == "before\n"
    assert (tmp_path / "work" / "a.txt.agentrt-undo-1").read_text() == "mine\n"


def compaction_shown_live_and_after_a_reload(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send_and_wait(page, "first " * 120)
    send_and_wait(page, "second " * 120)
    status = page.locator("#log .msg.status", has_text="earlier messages summarised")
    expect(status).to_have_count(1)
    live = status.inner_text()
    page.reload()
    expect(page.locator("#log .msg.user").last).to_contain_text("second")
    return {"live": live, "stored": status.all_inner_texts()}


async def test_a_compaction_is_said_live_and_in_the_stored_conversation(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    async with scripted_runtime(
        tmp_path / "state", tmp_path / "work", context=ContextLimits({"scripted": 300})
    ) as rt:
        seen = await in_browser(rt, compaction_shown_live_and_after_a_reload, viewport=DESKTOP)
    # The second message passed 85 % of the window: the first exchange was summarised (the
    # message itself, which the model has not answered yet, stays whole).
    assert seen["live"] == "(2 earlier messages summarised)"
    assert seen["stored"] == [seen["live"]]


def tokens_shown_after_each_run_and_a_reload(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    usage = page.locator("#usage")
    send_and_wait(page, "hello there")
    expect(usage).to_contain_text("tokens in")
    first = usage.inner_text()
    send_and_wait(page, "and again")
    expect(usage).not_to_have_text(first)
    second = usage.inner_text()
    page.reload()
    expect(usage).to_have_text(second)
    return {"first": first, "second": second}


async def test_the_sessions_tokens_are_shown_and_read_back_after_a_reload(
    runtime: Runtime,
) -> None:
    seen = await in_browser(runtime, tokens_shown_after_each_run_and_a_reload, viewport=DESKTOP)
    [session] = [s.session_id for s in (await runtime.store.sessions()).items]
    total = sum((run.tokens for run in await runtime.store.usage(session)), TokenCount())
    # What the store kept, in the terminal's words; the scripted model has no price.
    assert seen["second"] == f"tokens in {total.input_tokens} / out {total.output_tokens}"
    assert total.rounds == 2
    assert seen["first"] != seen["second"]

"""An MCP server's elicitation answered on the web page, in Debian's Chromium: each field a card
of the page's question form (choices as buttons, a typed answer in its own form)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .browser import DESKTOP
from .browser import Site
from .browser import in_browser
from .browser import needs_chromium
from .test_mcp import mcp_runtime
from .test_mcp import replay
from .test_mcp import server_table

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, needs_chromium]


def answer_the_elicitation(page: Page, site: Site) -> str:
    from playwright.sync_api import expect

    page.fill("#input", "who am I?")
    page.click("#send")
    card = page.locator(".question")
    expect(card.locator(".prompt")).to_have_text("MCP server fake asks: Who are you?")
    expect(card.locator(".meta")).to_contain_text("(fake__greet)")
    card.get_by_role("button", name="accept", exact=True).click()
    expect(card.locator(".prompt")).to_have_text("Name (your name)")
    card.get_by_label("answer").fill("Ada")
    card.get_by_role("button", name="Answer").click()
    expect(card.locator(".prompt")).to_have_text("Age")
    card.get_by_label("answer").fill("thirty")
    card.get_by_role("button", name="Answer").click()
    expect(card.locator(".error")).to_have_text("'thirty' is not a whole number")
    card.get_by_label("answer").fill("36")
    card.get_by_role("button", name="Answer").click()
    expect(card.locator(".prompt")).to_have_text("Colour")
    card.get_by_role("button", name="green", exact=True).click()
    expect(card.locator(".prompt")).to_have_text("Subscribe")
    card.get_by_role("button", name="yes", exact=True).click()
    expect(page.locator("#log .msg.status").last).to_have_text("finished")
    # The next call's progress notifications, each a line of the log.
    expect(page.locator("#log .msg.progress")).to_have_text(
        [f"… fake__slow: {n}/3 ({round(100 * n / 3)}%) step {n}" for n in range(3)]
    )
    return page.locator("#session-title").inner_text()


async def test_an_elicitation_is_answered_on_the_web_page(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    model = replay(tmp_path, ("fake__greet", {}), ("fake__slow", {"seconds": 0}))
    async with mcp_runtime(tmp_path, workdir, server_table("fake", "trust = true"), model) as rt:
        session = await in_browser(rt, answer_the_elicitation, viewport=DESKTOP)
        messages = await rt.store.messages(session)
    tool_results = [m.message.content for m in messages.items if m.message.role.value == "tool"]
    assert tool_results == ["hello Ada, 36, green, subscribed", "slept 0s"]

"""The web page in Debian's Chromium: what a resume will do, by its Resume button; and a
question shown only in the view of its own chat."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

from agentrt import Runtime

from .browser import DESKTOP
from .browser import Site
from .browser import in_browser
from .browser import log_in
from .browser import needs_chromium
from .conftest import scripted_runtime

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.e2e, needs_chromium]


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    (tmp_path / "work").mkdir()
    async with scripted_runtime(tmp_path / "state", tmp_path / "work") as rt:
        yield rt


def send(page: Page, text: str) -> None:
    page.fill("#input", text)
    page.click("#send")


def in_the_list(page: Page, sid: str) -> Any:
    return page.locator(f"#sessions li[data-session='{sid}']")


def pause_then_look_at_the_preview(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "big 100; sleep 30")
    # The big result is committed; the sleep runs on until the pause.
    expect(page.locator("#log .msg.tool", has_text="✓ big:")).to_be_visible()
    sid = page.locator("#session-title").inner_text()
    page.click("#stop")
    page.click("#stop-pause")
    expect(page.locator("#log .msg.status").last).to_contain_text("stopped (pause)")
    expect(page.locator("#paused-preview")).to_be_visible()
    shown = page.locator("#paused-preview-lines li").all_text_contents()
    described = page.locator("#paused-resume").evaluate(
        "el => document.getElementById(el.getAttribute('aria-describedby')).textContent"
    )
    task = page.evaluate(
        """async (sid) => {
            const token = sessionStorage.getItem("agentrt.token");
            const r = await fetch(`/v1/session/${sid}/task`,
                                  {headers: {Authorization: `Bearer ${token}`}});
            return (await r.json()).task;
        }""",
        sid,
    )
    # Another chat's Resume in the list opens that chat first, to show what it will do.
    page.click("#new-chat")
    expect(page.locator("#paused")).to_be_hidden()
    in_the_list(page, sid).locator("button.resume").click()
    expect(page.locator("#session-title")).to_have_text(sid)
    expect(page.locator("#paused-preview-lines li")).to_have_count(len(shown))
    status_after_opening = in_the_list(page, sid).get_attribute("data-status")
    # Its own Resume resumes it; the preview goes with the panel.
    page.click("#paused-resume")
    expect(page.locator("#log .msg.status", has_text="resumed the pending task")).to_be_visible()
    expect(page.locator("#paused-preview")).to_be_hidden()
    page.click("#stop")
    page.click("#stop-yes")
    expect(page.locator("#log .msg.status").last).to_contain_text("stopped (user_cancel)")
    return {
        "shown": shown,
        "described": described,
        "task": task,
        "status_after_opening": status_after_opening,
    }


async def test_the_resume_button_says_what_resuming_will_do(runtime: Runtime) -> None:
    seen = await in_browser(runtime, pause_then_look_at_the_preview, viewport=DESKTOP)
    shown = seen["shown"]
    # The server's lines, every one, in its words (the terminal's and the bots' too).
    assert shown == seen["task"]["preview"]["lines"]
    assert shown[:2] == [
        "resume will keep 1 call (its result is saved, it does not run again)",
        "resume will run 1 call:",
    ]
    assert shown[2].startswith("  sleep call_1_1 ("), shown
    assert "resume will run 1 call:" in seen["described"]
    # Opening the chat from the list did not resume it.
    assert seen["status_after_opening"] == "interrupted"
    assert await runtime.store.list() == []


def a_question_in_one_chat_only(page: Page, site: Site, work: Path) -> dict[str, Any]:
    from playwright.sync_api import expect

    send(page, "write a.txt hi")
    card = page.locator(".question[data-kind=confirm]")
    expect(card).to_be_visible()
    sid = page.locator("#session-title").inner_text()
    # Headed with the chat's title, once the server gives it.
    expect(page.locator("#questions-heading")).to_have_text("write a.txt hi")

    # A second tab, as a person opens one: it starts on no chat, and New chat shows no card.
    other = page.context.new_page()
    log_in(other, site)
    waits = in_the_list(other, sid).locator(".waiting")
    expect(waits).to_contain_text("waits on web: confirm")
    expect(other.locator(".question")).to_have_count(0)
    other.click("#new-chat")
    expect(other.locator("#session-title")).not_to_have_text(sid)
    expect(other.locator(".question")).to_have_count(0)
    expect(other.locator("#questions")).to_be_hidden()
    # Its own chat shows it, in that tab too; leaving for a new chat hides it again.
    in_the_list(other, sid).locator("button.sid").click()
    expect(other.locator(".question[data-kind=confirm]")).to_be_visible()
    expect(other.locator("#questions-heading")).to_have_text("write a.txt hi")
    other.click("#new-chat")
    expect(other.locator(".question")).to_have_count(0)

    # In the first tab: New chat hides it, switching back shows it, Allow there answers it.
    page.click("#new-chat")
    expect(page.locator(".question")).to_have_count(0)
    in_the_list(page, sid).locator("button.sid").click()
    expect(card).to_be_visible()
    written_before = (work / "a.txt").exists()
    card.get_by_role("button", name="Allow", exact=True).click()
    expect(card).to_have_count(0)
    expect(page.locator("#log .msg.status").last).to_have_text("finished")
    other.close()
    return {"sid": sid, "written_before": written_before}


async def test_a_question_shows_only_in_its_own_chat_and_is_answered_there(
    runtime: Runtime, tmp_path: Path
) -> None:
    scenario = partial(a_question_in_one_chat_only, work=tmp_path / "work")
    seen = await in_browser(runtime, scenario, viewport=DESKTOP)
    assert seen["written_before"] is False
    assert (tmp_path / "work" / "a.txt").read_text() == "hi"
    assert await runtime.store.list() == []

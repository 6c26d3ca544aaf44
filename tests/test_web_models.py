"""The web page's model picker, plain-text titles, regenerate and edit-and-resend, in Debian's
Chromium against a real server whose runtime offers a replay model beside the scripted one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import pytest

from agentrt import Runtime

from .browser import DESKTOP
from .browser import PHONE
from .browser import Site
from .browser import in_browser
from .browser import needs_chromium
from .conftest import Recorder
from .conftest import scripted_runtime
from .test_web_page import open_sessions
from .test_web_page import send_and_wait

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from playwright.sync_api import Route

pytestmark = [pytest.mark.e2e, needs_chromium]

WIDTHS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280px", "375px"])


@pytest.fixture
async def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Runtime]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "work").mkdir()
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"turns": [{"text": f"replayed {n}"} for n in range(9)]}))
    async with scripted_runtime(
        tmp_path / "state", tmp_path / "work", models=[f"replay:{replay}", "openai:gpt-x"]
    ) as rt:
        yield rt


def replay_of(runtime: Runtime) -> str:
    return next(e.name for e in runtime.executor.models() if e.name.startswith("replay:"))


def texts(page: Page, kind: str) -> list[str]:
    found: list[str] = page.locator(f"#log .msg.{kind}").all_inner_texts()
    return found


# -- titles ---------------------------------------------------------------------------------


def read_titles(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    open_sessions(page)
    expect(page.locator("#sessions li")).to_have_count(3)
    names = page.locator("#sessions .name").all_inner_texts()
    page.locator("#sessions li[data-session='chat-plan'] .sid").click()
    expect(page.locator("#session-name")).to_be_visible()
    return {"names": names, "header": page.locator("#session-name").inner_text()}


@WIDTHS
async def test_chat_titles_are_plain_text(runtime: Runtime, viewport: dict[str, int]) -> None:
    for session, text in (
        ("chat-code", "Hi \\*\\*there\\*\\* and `some_code` and [the docs](http://x.test/d)"),
        ("chat-bold", "Hi **there**, _you_ ~~old~~ friend"),
        ("chat-plan", "## Plan\nthe rest"),
    ):
        await runtime.executor.run(session, text, owner="o", emit=Recorder())
    seen = await in_browser(runtime, read_titles, viewport=viewport)
    assert seen["names"] == [
        "Plan",
        "Hi there, you old friend",
        "Hi **there** and some_code and the docs",
    ]
    assert seen["header"] == "Plan"


# -- the model picker -------------------------------------------------------------------------


def pick_a_model(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    picker = page.locator("#model")
    expect(picker).to_be_visible()
    options = picker.locator("option")
    listed = options.all_inner_texts()
    disabled = [o.get_attribute("disabled") is not None for o in options.all()]
    why = page.locator("#model-why").inner_text()
    chosen = page.evaluate("() => document.querySelector('#model').value")
    replay = options.nth(1).get_attribute("value")
    assert replay is not None
    # A new chat: choosing a model gives it its id, and its first run talks to that model.
    picker.select_option(replay)
    expect(page.locator("#session-title")).not_to_have_text("New chat")
    session = page.locator("#session-title").inner_text()
    send_and_wait(page, "hello")
    expect(page.locator("#log .msg.assistant")).to_have_text(["replayed 0"])
    page.reload()
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#session-title")).to_have_text(session)
    expect(picker).to_have_value(replay)
    # Another chat runs with the default, and says so.
    open_sessions(page)
    page.click("#new-chat")
    expect(picker).to_have_value("scripted")
    send_and_wait(page, "plain words")
    expect(page.locator("#log .msg.assistant")).not_to_have_text(["replayed 0"])
    return {
        "listed": listed,
        "disabled": disabled,
        "why": why,
        "chosen": chosen,
        "replay": replay,
        "session": session,
        "other": texts(page, "assistant"),
    }


@WIDTHS
async def test_the_model_picker_lists_the_models_and_sets_a_chats(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, pick_a_model, viewport=viewport)
    replay = replay_of(runtime)
    assert seen["listed"] == [
        "scripted (default)",
        replay,
        "openai:gpt-x (cannot be used)",
    ]
    assert seen["disabled"] == [False, False, True]
    assert "openai:gpt-x: no API key" in seen["why"] and "OPENAI_API_KEY" in seen["why"]
    assert seen["chosen"] == "scripted" and seen["replay"] == replay
    assert await runtime.store.session_model(seen["session"]) == replay
    assert seen["other"] and seen["other"] != ["replayed 0"]


def pick_twice_quickly(page: Page, site: Site) -> dict[str, Any]:
    """Two models picked one after the other while the first pick is on its way."""
    from playwright.sync_api import expect

    picker = page.locator("#model")
    expect(picker).to_be_visible()
    replay = picker.locator("option").nth(1).get_attribute("value")
    assert replay is not None
    held: list[Route] = []
    #: Reads of the chat's model (the new chat's, as it is shown), answered late.
    reads: list[Route] = []

    def hold(route: Route) -> None:
        (held if route.request.method == "PUT" else reads).append(route)

    page.route("**/model", hold)
    with page.expect_request(lambda r: r.method == "PUT" and r.url.endswith("/model")):
        picker.select_option(replay)
    session = page.locator("#session-title").inner_text()
    picker.select_option("scripted")
    page.evaluate("0")  # a round trip more: a request the pick sent has reached the route
    sent_while_held = len(held)
    if sent_while_held == 1:
        with page.expect_request(lambda r: r.method == "PUT" and r.url.endswith("/model")):
            held[0].continue_()
        # While the second pick is on its way the picker shows it, not the first's answer,
        # even when a read of the chat's model answers meanwhile (with the first's).
        assert reads, "showing the new chat reads its model"
        for route in reads:
            with page.expect_response(route.request.url) as answered:
                route.continue_()
            answered.value.finished()
        page.evaluate("new Promise((done) => setTimeout(done))")  # the page has read it
        assert picker.input_value() == "scripted"
        held[1].continue_()
    else:  # both on their way at once: the server may take them last first, as here
        for route in [*reversed(held), *reads]:
            route.continue_()
    sent = [json.loads(route.request.post_data or "{}") for route in held]
    page.unroute("**/model")
    send_and_wait(page, "which model?")
    return {
        "session": session,
        "sent_while_held": sent_while_held,
        "sent": sent,
        "picked": picker.input_value(),
        "answer": texts(page, "assistant"),
    }


async def test_two_quick_picks_reach_the_server_in_order_and_the_last_one_holds(
    runtime: Runtime,
) -> None:
    seen = await in_browser(runtime, pick_twice_quickly, viewport=DESKTOP)
    # The second choice waited for the first: never two on their way at once, so the
    # server cannot take them in the other order.
    assert seen["sent_while_held"] == 1
    assert seen["sent"] == [{"model": replay_of(runtime)}, {"model": "scripted"}]
    assert seen["picked"] == "scripted"
    assert await runtime.executor.session_model(seen["session"]) == "scripted"
    assert seen["answer"] and seen["answer"] != ["replayed 0"]


# -- regenerate and edit ----------------------------------------------------------------------


def regenerate_and_edit(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    regenerate = page.locator("#regenerate")
    expect(regenerate).to_be_hidden()  # nothing to regenerate yet
    send_and_wait(page, "first words")
    send_and_wait(page, "second words")
    scripted = texts(page, "assistant")
    session = page.locator("#session-title").inner_text()
    # Regenerate with another model: the last reply is replaced, the rest stays.
    replay = page.locator("#model option").nth(1).get_attribute("value")
    assert replay is not None
    # The choice is held on its way to the server while regenerate is clicked: the
    # regenerate waits for it (none reaches the server before), and runs with the model
    # chosen.
    held: list[Route] = []
    early: list[str] = []

    def hold_the_choice(route: Route) -> None:
        request = route.request
        if request.method == "PUT" and request.url.endswith("/model"):
            held.append(route)
            return
        if held and request.url.endswith("/regenerate"):
            early.append(request.url)
        route.continue_()

    page.route("**/model", hold_the_choice)
    page.route("**/regenerate", hold_the_choice)
    with page.expect_request(lambda r: r.method == "PUT" and r.url.endswith("/model")):
        page.locator("#model").select_option(replay)
    expect(page.locator("#model")).to_have_value(replay)
    regenerate.click()
    page.evaluate("0")  # a round trip more: a request the click sent has reached the route
    assert len(held) == 1 and not early, early
    choice = held.pop()
    choice.continue_()
    page.unroute("**/model")
    page.unroute("**/regenerate")
    expect(page.locator("#log .msg.assistant").last).to_have_text("replayed 1")
    expect(page.locator("#send")).to_be_enabled()
    regenerated = {"user": texts(page, "user"), "assistant": texts(page, "assistant")}
    # Edit and resend: the last message and all after it are replaced.
    page.click("#edit-last")
    expect(page.locator("#input")).to_have_value("second words")
    expect(page.locator("#send")).to_have_text("Resend")
    page.fill("#input", "the edited words")
    page.click("#send")
    expect(page.locator("#log .msg.user").last).to_have_text("the edited words")
    expect(page.locator("#log .msg.assistant").last).to_have_text("replayed 1")
    expect(page.locator("#send")).to_have_text("Send")
    expect(page.locator("#send")).to_be_enabled()
    edited = {"user": texts(page, "user"), "assistant": texts(page, "assistant")}
    page.reload()
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#log .msg.user")).to_have_count(2)
    reloaded = {"user": texts(page, "user"), "assistant": texts(page, "assistant")}
    return {
        "scripted": scripted,
        "session": session,
        "regenerated": regenerated,
        "edited": edited,
        "reloaded": reloaded,
    }


@WIDTHS
async def test_regenerate_and_edit_and_resend_replace_the_last_turn(
    runtime: Runtime, viewport: dict[str, int]
) -> None:
    seen = await in_browser(runtime, regenerate_and_edit, viewport=viewport)
    first_reply = seen["scripted"][0]
    assert seen["regenerated"] == {
        "user": ["first words", "second words"],
        "assistant": [first_reply, "replayed 1"],
    }
    assert seen["edited"] == {
        "user": ["first words", "the edited words"],
        "assistant": [first_reply, "replayed 1"],
    }
    assert seen["reloaded"] == seen["edited"]
    history = await runtime.store.load_history(seen["session"])
    assert [m.content for m in history] == [
        "first words",
        first_reply,
        "the edited words",
        "replayed 1",
    ]


def refused_while_pending(page: Page, site: Site) -> dict[str, Any]:
    from playwright.sync_api import expect

    send_and_wait(page, "hello")
    send_and_wait(page, "ask Colour?")  # the run saves its question: a pending task
    expect(page.locator("#saved")).to_be_visible()
    before = page.locator("#log .msg").all_inner_texts()
    page.click("#regenerate")
    expect(page.locator("#notice")).to_be_visible()
    notice = page.locator("#notice").inner_text()
    return {
        "before": before,
        "after": page.locator("#log .msg").all_inner_texts(),
        "notice": notice,
    }


async def test_regenerate_while_a_task_is_pending_is_refused_and_changes_nothing(
    runtime: Runtime,
) -> None:
    seen = await in_browser(runtime, refused_while_pending, viewport=DESKTOP)
    assert "has a pending task" in seen["notice"]
    assert seen["after"] == seen["before"]

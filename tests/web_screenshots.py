"""Takes the web page's screenshots in docs/: ``python -m tests.web_screenshots [FOLDER]``.

A real server on the scripted model, Debian's Chromium, and the same scenarios
a person would play: a chat with a pending task and an open confirmation
(desktop, light and dark), the same on a phone, and a Markdown reply with code.
"""

from __future__ import annotations

import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Literal

import trio

from agentrt import ScriptedModel
from agentrt import open_runtime

from .browser import DESKTOP
from .browser import PHONE
from .browser import Site
from .browser import in_browser

if TYPE_CHECKING:
    from playwright.sync_api import Page

REPLY = (
    "Here is the **plan**:\n\n1. read the notes\n2. write `summary.txt`\n\n"
    "```python\nfrom pathlib import Path\n\nnotes = Path('notes.txt').read_text()\n"
    "print(len(notes.split()), 'words')\n```\n\n> Each step asks before it writes."
)


def _wait_done(page: Page) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#send")).to_be_enabled()


def _chat(page: Page, site: Site, *, path: Path, phone: bool) -> None:
    from playwright.sync_api import expect

    # A paused task in the list, then a chat waiting on a confirmation.
    page.fill("#input", "stream 300")
    page.click("#send")
    expect(page.locator("#log .msg.assistant").last).to_contain_text("word12")
    page.click("#stop")
    page.click("#stop-pause")
    _wait_done(page)
    if phone:
        page.click("#toggle-sidebar")
    page.click("#new-chat")
    page.fill("#input", "Summarise notes.txt")
    page.click("#send")
    _wait_done(page)
    page.fill("#input", "write summary.txt 42 words about trio; ask Anything else?")
    page.click("#send")
    expect(page.locator(".question[data-kind=confirm]")).to_be_visible()
    expect(page.locator("#sessions li.current .waiting")).to_contain_text("waits on web")
    page.locator("#input").fill("")
    page.screenshot(path=str(path))
    page.locator(".question button", has_text="Deny").click()
    _wait_done(page)


def _markdown(page: Page, site: Site, *, path: Path) -> None:
    page.fill("#input", REPLY)
    page.click("#send")
    _wait_done(page)
    page.locator("#log .code-block").last.hover()
    page.screenshot(path=str(path))


async def _shoot(folder: Path) -> None:
    shots: list[tuple[str, dict[str, int], Literal["light", "dark"], str]] = [
        ("web-desktop-light.png", DESKTOP, "light", "chat"),
        ("web-desktop-dark.png", DESKTOP, "dark", "chat"),
        ("web-phone.png", PHONE, "light", "chat"),
        ("web-markdown.png", DESKTOP, "light", "markdown"),
    ]
    for name, viewport, scheme, kind in shots:
        with tempfile.TemporaryDirectory() as tmp:
            async with open_runtime(
                Path(tmp) / "state",
                model=ScriptedModel(word_delay=0.005, stream_delay=0.01),
                workdir=Path(tmp),
                restricted_paths=[],
            ) as runtime:
                path = folder / name
                if kind == "chat":
                    scenario = partial(_chat, path=path, phone=viewport is PHONE)
                else:
                    scenario = partial(_markdown, path=path)
                await in_browser(runtime, scenario, viewport=viewport, color_scheme=scheme)
        print(f"wrote {path}")


if __name__ == "__main__":
    trio.run(_shoot, Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))

"""Driving the web page in Debian's Chromium through Playwright, against a real server.

A test starts the HTTP server on a runtime in its Trio nursery and hands a
*scenario* (a plain function of a Playwright page and the `Site`) to
`in_browser`, which runs it in a worker thread with Playwright's sync API, in
a fresh browser at the viewport the test names, logged in as a person logs in.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING
from typing import Literal
from typing import TypeVar

import attrs
import pytest
import trio

from agentrt import Runtime
from agentrt.http import load_or_create_token
from agentrt.http import serve_http

from .fakes.proxy import CuttableProxy

if TYPE_CHECKING:
    from playwright.sync_api import Page

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

#: The widths every item of the page is tried at: a desktop and a phone.
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 740}
#: The narrowest phone the layout is made for.
NARROW = {"width": 320, "height": 640}

#: Skips a browser test where Debian's Chromium is missing (`make system-deps` installs it).
needs_chromium = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"{CHROMIUM} is not installed (make system-deps)"
)

T = TypeVar("T")


@attrs.frozen
class Site:
    """The server a scenario's page talks to.

    With a `proxy`, the page reaches the server through it (`base`) and the
    test can cut the page's connections; `direct` is the server's own address.
    """

    base: str
    token: str
    direct: str
    proxy: CuttableProxy | None = None

    def cut_and_hold(self) -> None:
        """Close the page's connections; its new ones wait until `release` (from the thread)."""
        assert self.proxy is not None, "in_browser(..., through_proxy=True) makes a proxy"
        trio.from_thread.run_sync(self.proxy.hold)
        trio.from_thread.run_sync(self.proxy.cut)

    def release(self) -> None:
        """Let the page's connections through again."""
        assert self.proxy is not None
        trio.from_thread.run_sync(self.proxy.release)


def log_in(page: Page, site: Site) -> None:
    """Open the page and paste the token into its form, as a person does."""
    from playwright.sync_api import expect

    page.goto(f"{site.base}/")
    page.fill("#token", site.token)
    page.click("#log-in")
    expect(page.locator("#login")).to_be_hidden()
    expect(page.locator("#conn")).to_have_text("live")


def _drive(
    scenario: Callable[[Page, Site], T],
    site: Site,
    viewport: dict[str, int],
    color_scheme: Literal["light", "dark"],
    permissions: Sequence[str],
) -> T:
    from playwright.sync_api import expect
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = browser.new_context(
                viewport={"width": viewport["width"], "height": viewport["height"]},
                color_scheme=color_scheme,
            )
            if permissions:
                context.grant_permissions(list(permissions), origin=site.base)
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            expect.set_options(timeout=PAGE_TIMEOUT_MS)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            log_in(page, site)
            result = scenario(page, site)
            assert errors == [], f"the page's script failed: {errors}"
            return result
        finally:
            browser.close()


async def in_browser(
    runtime: Runtime,
    scenario: Callable[[Page, Site], T],
    *,
    viewport: dict[str, int],
    color_scheme: Literal["light", "dark"] = "light",
    permissions: Sequence[str] = (),
    through_proxy: bool = False,
) -> T:
    """Serve `runtime` over HTTP and run `scenario` in a logged-in page; return its result.

    `through_proxy` puts a `CuttableProxy` between the page and the server: the
    server listens on 127.0.0.2 and the proxy on 127.0.0.1 with the same port,
    so the page's ``Host`` header names an address the server answers to.
    """
    pytest.importorskip("playwright")
    token = load_or_create_token(runtime.state_dir)
    host = "127.0.0.2" if through_proxy else "127.0.0.1"
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, runtime, host, 0, token=token))
        direct = f"http://{host}:{port}"
        site = Site(direct, token, direct)
        if through_proxy:
            proxy = CuttableProxy(host, port)
            await nursery.start(proxy.run, "127.0.0.1", port)
            site = Site(f"http://127.0.0.1:{port}", token, direct, proxy)
        with trio.fail_after(100):
            result = await trio.to_thread.run_sync(
                partial(_drive, scenario, site, viewport, color_scheme, permissions),
                abandon_on_cancel=True,
            )
        nursery.cancel_scope.cancel()
    return result

"""`/model`, ``@path`` and `/new` in the real ``agenttui``, in tmux, against a daemon whose
configuration offers a second model: the fake OpenAI-compatible server of `tests.fakes`."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import trio

from ..fakes.llm_server import OA_DONE
from ..fakes.llm_server import LLMServer
from ..fakes.llm_server import oa_finish
from ..fakes.llm_server import oa_text
from ..fakes.llm_server import sse
from .test_tui_tmux import World
from .test_tui_tmux import wait_until
from .test_tui_tmux import world  # noqa: F401  (fixtures)


@contextlib.contextmanager
def served() -> Iterator[LLMServer]:
    """The fake model server, run by Trio in a thread of its own for the test's length."""
    server = LLMServer()
    ready = threading.Event()
    held: dict[str, Any] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            held["scope"] = nursery.cancel_scope
            held["token"] = trio.lowlevel.current_trio_token()
            await nursery.start(server.run)
            ready.set()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    assert ready.wait(10), "the fake model server did not start"
    try:
        yield server
    finally:
        trio.from_thread.run_sync(held["scope"].cancel, trio_token=held["token"])
        thread.join(10)


def test_model_switch_attach_a_file_and_start_anew(world: World) -> None:  # noqa: F811
    with served() as server:
        server.script(sse([oa_text("plum it is"), oa_finish(), OA_DONE]))
        config = world.root / "config.toml"
        config.write_text(
            f'models = ["openai:fake-m1"]\n\n[openai]\nbase_url = "{server.base_url}/v1"\n',
            "utf-8",
        )
        world.start_daemon({"AGENTRT_CONFIG": str(config)})
        (world.root / "notes.txt").write_text("the secret word is plum\n", "utf-8")
        (world.root / "blob.bin").write_bytes(b"\x00\x01binary")
        window = world.open_window()

        # /model lists the configured models, the one in use highlighted, and switches.
        screen = window.send("/model", r"Models \(Enter switches", "the /model picker")
        assert "> scripted  (in use, default)" in screen
        assert "  openai:fake-m1" in screen
        window.keys("Down", "Enter")
        window.wait_for(r"Model openai:fake-m1: this conversation", "the switch to be said")
        window.wait_for(r"model openai:fake-m1", "the status line to name the model")

        # @ completes paths of the window's folder as they are typed.
        window.type("what does @no")
        window.wait_for(r"notes\.txt", "the completion menu")
        window.keys("Tab")
        wait_until(lambda: "@notes.txt" in window.input_line(), "Tab to complete the path")
        # A binary file is refused, and the message stays to be fixed.
        window.send(
            " and @blob.bin say", r"cannot attach @blob\.bin: it is a binary file", "the refusal"
        )
        assert "and @blob.bin say" in window.input_line()
        for _ in " and @blob.bin say":
            window.keys("BSpace")
        window.keys("Escape")  # the notice
        screen = window.send(" say", r"plum it is[\s\S]*idle", "the fake model's reply, then idle")
        assert "> what does @notes.txt say" in screen
        assert "+ attached notes.txt (24 bytes)" in screen
        assert "the secret word is plum" not in screen  # the transcript shows the line only
        [asked] = server.requests
        said = asked.json()
        assert said["model"] == "fake-m1"
        [user] = [m for m in said["messages"] if m["role"] == "user"]
        assert user["content"].startswith("what does @notes.txt say")
        assert "the secret word is plum" in user["content"]

        # /new: an empty transcript and a new session, on the default model again.
        screen = window.send("/new", r"New conversation", "the /new notice")
        assert "plum it is" not in screen and "what does" not in screen
        window.keys("Escape")
        screen = window.send("hello again", r"-- Done", "the scripted model's run to end")
        assert "> hello again" in screen
        assert len(server.requests) == 1

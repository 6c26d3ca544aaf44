"""An MCP server's elicitation answered inline in the real ``agenttui``, in tmux, against a real
daemon running the FastMCP server of tests/fakes/mcp_server.py."""

from __future__ import annotations

from ..test_mcp import replay
from ..test_mcp import server_table
from .test_tui_tmux import World
from .test_tui_tmux import world  # noqa: F401  (fixtures)


def test_an_elicitation_is_answered_inline_field_by_field(world: World) -> None:  # noqa: F811
    model = replay(world.root, ("fake__greet", {}), ("fake__slow", {"seconds": 0}))
    config = f'model = "{model.source}"\n' + server_table("fake", "trust = true")
    world.start_daemon(world.configured(config))
    term = world.open_window()
    screen = term.send(
        "who am I?", r"\? MCP server fake asks: Who are you\?", "the elicitation", 40
    )
    assert "[1. accept]" in screen and "2. decline" in screen and "3. cancel" in screen
    term.keys("1")
    term.wait_for(r"\? Name \(your name\)", "the name field")
    term.send("Ada", r"\? Age", "the age field")
    term.send("thirty", r"'thirty' is not a whole number", "the age asked again, saying why")
    screen = term.send("36", r"\? Colour", "the colour choices")
    assert "1. red" in screen and "2. green" in screen and "3. blue" in screen
    term.keys("2")
    term.wait_for(r"\? Subscribe", "the boolean field")
    term.keys("1")
    term.wait_for(r"hello Ada, 36, green, subscribed", "the server's answer")
    # The next call's progress notifications, each a line, before its result.
    screen = term.wait_for(r"fake__slow: slept 0s", "the slow call's result")
    steps = [f"fake__slow: {n}/3 ({n / 3:.0%}) step {n}" for n in range(3)]
    at = [screen.index(step) for step in steps]
    assert at == sorted(at) and at[-1] < screen.index("fake__slow: slept 0s")

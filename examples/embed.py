"""Embedding agentrt in your own Trio program.

Run it with ``python examples/embed.py`` (about two seconds). It opens a
runtime in a temporary state directory, answers the agent's confirmations from
code with a listener of its own, pauses a run in the middle of a long tool
call, shows the pending task the pause kept, and resumes it to the end without
redoing the committed work. Then a chat-origin run parks on a question and an
answer resumes it as a new turn.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from agentrt import Cause
from agentrt import Event
from agentrt import Registry
from agentrt import RequestKind
from agentrt import RunEnded
from agentrt import ScriptedModel
from agentrt import TextEvent
from agentrt import ToolResultEvent
from agentrt import open_runtime


async def allow_confirmations(registry: Registry) -> None:
    """A front-end of our own: allow every confirmation of a cli- session."""
    with registry.listen("cli-", name="embedder") as listener:
        while True:
            entry = await listener.claim()
            assert entry.request.kind is RequestKind.CONFIRM
            print(f"  [allow] {entry.request.prompt}")
            entry.answer("allow")


async def main(workdir: Path, state: Path) -> list[RunEnded]:
    """Run, pause, inspect, resume; then park and answer. Returns the final events."""
    ends: list[RunEnded] = []
    async with open_runtime(state, model=ScriptedModel(word_delay=0), workdir=workdir) as rt:

        async def show(event: Event) -> None:
            if isinstance(event, TextEvent):
                print(event.text, end="", flush=True)
            elif isinstance(event, ToolResultEvent):
                print(f"  [{event.name}] {event.preview[:50]}")
                if event.name == "write_file":
                    # Pause while the round's long `sleep` call is still running.
                    rt.executor.cancel(event.task_hash, Cause.PAUSE, owner="me")
            elif isinstance(event, RunEnded):
                print(f"\n  [ended] {event.outcome.value} cause={event.cause}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(allow_confirmations, rt.registry)
            ends.append(
                await rt.executor.run(
                    "cli-demo", "write notes.txt hello; sleep 2", owner="me", emit=show
                )
            )
            record = await rt.store.load("cli-demo")
            assert record is not None
            print(
                f"  [kept] {record.status.value}, still to run: "
                f"{[c.name for c in record.unanswered_calls()]}"
            )
            # Only the uncommitted sleep runs again; the file is not written twice.
            ends.append(await rt.executor.resume("cli-demo", owner="me", emit=show))
            nursery.cancel_scope.cancel()

        # From a chat- session, ask_user saves the question and ends the run.
        ends.append(await rt.executor.run("chat-demo", "ask Your name?", owner="me", emit=show))
        ends.append(await rt.executor.resume("chat-demo", answer="Ada", owner="me", emit=show))
    return ends


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "work").mkdir()
        final = trio.run(main, Path(tmp) / "work", Path(tmp) / "state")
    print("outcomes:", [e.outcome.value for e in final])

"""``mcp_call``: one MCP tool call through agentrt against the SDK's bare ``call_tool``.

Both go to the same server process (the FastMCP server of
``tests/fakes/mcp_server.py``, its ``echo`` tool) over the same connection, in
the same run, interleaved ABBA. The subject is `McpClients.call`, what every
MCP call of a run goes through: the server's state, the watch for a server
that breaks during the call, the channel its elicitations come back on, the
timeout and the result's text. The baseline is the SDK's
``ClientSession.call_tool`` on that session, and nothing else.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import trio

from ._harness import Batch
from ._harness import Result
from ._harness import interleave

#: The test server, run as a program.
SERVER = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "mcp_server.py"
TARGET = 1.3


async def bench_mcp_call(root: Path, rounds: int = 40, batch: int = 25) -> Result:
    """The median time of one echo call through agentrt, and bare, in the same run."""
    from agentrt.agent.mcp import Elicitation
    from agentrt.agent.mcp import ElicitReply
    from agentrt.agent.mcp import McpClients
    from agentrt.agent.sandbox import Sandbox
    from agentrt.config.mcp import parse_server

    work = root / "work"
    work.mkdir()
    config = {"bench": parse_server("bench", {"command": sys.executable, "args": [str(SERVER)]})}
    sandbox = Sandbox.detect()
    clients = McpClients(config, root / "mcp", work, sandbox=sandbox)
    problems: list[str] = []

    async def never_asked(elicitation: Elicitation) -> ElicitReply:
        problems.append(f"an elicitation came: {elicitation.message}")
        await trio.lowlevel.checkpoint()
        return "cancel", None

    async with trio.open_nursery() as nursery:
        await nursery.start(clients.run)
        with trio.fail_after(60):
            await clients.wait_settled()
        server = clients.servers["bench"]
        session = server.session
        if session is None:
            nursery.cancel_scope.cancel()
            return Result.failed(
                "mcp_call", f"the server did not start: {server.why}", 0.0, TARGET, 0
            )

        async def through_agentrt() -> float:
            start = time.perf_counter()
            for _ in range(batch):
                text = await clients.call("bench__echo", {"text": "x"}, ask=never_asked)
                if text != "echo: x":
                    problems.append(f"agentrt's call said {text!r}")
            return (time.perf_counter() - start) / batch

        async def bare() -> float:
            start = time.perf_counter()
            for _ in range(batch):
                result = await session.call_tool("echo", {"text": "x"})
                if result.is_error:
                    problems.append("the bare call failed")
            return (time.perf_counter() - start) / batch

        subject: Batch = through_agentrt
        subject_median, baseline_median = await interleave(subject, bare, rounds)
        nursery.cancel_scope.cancel()
    where = "in the sandbox" if sandbox.enforced else f"unsandboxed ({sandbox.why})"
    return Result(
        "mcp_call",
        subject_median,
        baseline_median,
        "ratio",
        TARGET,
        rounds,
        tuple(problems[:3]),
        (
            f"median of {rounds} batches of {batch} calls of a FastMCP server's echo tool over "
            f"stdio, {where}; the baseline is the SDK's ClientSession.call_tool on the same "
            "session",
        ),
    )


async def run_all(root: Path) -> list[Result]:
    """The MCP benchmark at its full size."""
    return [await bench_mcp_call(root)]

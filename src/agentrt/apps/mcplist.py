"""``agentrt mcp list``: each configured MCP server, where it stands, and its tools.

With a daemon running on the state dir, its servers' states are read from
the status file it keeps (``STATE_DIR/mcp/status.json``). Without one, each
server is started here, as the daemon would start it (in the sandbox), and
shown once it is ready or has failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from typing import Final

import trio

from ..agent.mcp import ServerState
from ..agent.mcp import ServerStatus
from ..agent.mcp import read_status
from ..config.settings import Settings
from ..core.process import pid_alive

#: Seconds past the longest startup_timeout that a look without a daemon may take.
PROBE_SLACK: Final = 5.0


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """Print the servers (``--json``: one JSON object); 0, or 1 when one has failed."""
    servers = settings.mcp_servers
    if not servers:
        print(
            f"no MCP servers are configured; add a [mcp.servers.NAME] table to "
            f"{settings.config.value} (see docs/mcp.md)"
        )
        return 0
    folder = settings.state_dir.value / "mcp"
    kept = read_status(folder)
    source = "as the daemon runs them"
    if kept is not None and _alive(kept[0]):
        statuses = kept[1]
    else:
        # Their failures are shown below, not logged as they come.
        logging.getLogger("agentrt.mcp").setLevel(logging.CRITICAL)
        statuses = trio.run(_probe, settings)
        source = "started here to look: no daemon is running"
    if args.json:
        print(json.dumps({"source": source, "servers": [s.as_json() for s in statuses]}, indent=2))
    else:
        print(f"MCP servers ({source}):")
        for status in statuses:
            print(_line(status))
    return 1 if any(s.state is ServerState.FAILED for s in statuses) else 0


def _line(status: ServerStatus) -> str:
    state = status.state.value
    if status.state is ServerState.FAILED:
        state = f"failed: {status.why}"
    elif status.state is ServerState.READY and status.transport == "stdio":
        state += " (sandboxed)" if status.sandboxed else " (NOT sandboxed)"
    times = "once" if status.restarts == 1 else f"{status.restarts} times"
    restarts = f", started again {times}" if status.restarts else ""
    line = f"  {status.name}  {status.transport}  {state}{restarts}"
    if status.tools:
        names = ", ".join(f"{status.name}__{t}" for t in status.tools)
        line += f"\n    {len(status.tools)} tools: {names}"
    return line


def _alive(pid: int) -> bool:
    return pid != os.getpid() and pid_alive(pid)


async def _probe(settings: Settings) -> list[ServerStatus]:
    """Start every server as the runtime does, wait until each is ready or failed; their states."""
    from ..core.runtime import open_runtime
    from ..models.scripted import ScriptedModel

    bound = max(s.startup_timeout for s in settings.mcp_servers.values()) + PROBE_SLACK
    async with open_runtime(settings=settings, model=ScriptedModel()) as runtime:
        clients = runtime.executor.config.mcp
        assert clients is not None
        with contextlib.suppress(trio.TooSlowError), trio.fail_after(bound):
            await clients.wait_settled()
        return clients.statuses()

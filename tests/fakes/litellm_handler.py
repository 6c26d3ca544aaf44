"""The scripted model behind LiteLLM's proxy in `tests/test_litellm_server.py`.

LiteLLM's own ``mock_response`` streams text but not tool calls, so the tool
model is this `CustomLLM`, the proxy's documented extension point, loaded by
its ``custom_provider_map``. It only says *what* to answer, in LiteLLM's
neutral chunk form; the proxy (FastAPI, LiteLLM's stream wrapper) turns that
into the OpenAI wire format the test's client reads, which is the part under
test. It runs inside the proxy's own virtualenv, never in the project's.

The script: offered a ``read_file`` tool, it asks for ``notes.txt``, with the
arguments cut mid-JSON; once the transcript ends in that tool's result, it
says what the note says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litellm import CustomLLM


def _chunk(
    text: str = "",
    tool: dict[str, Any] | None = None,
    finish: str = "",
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    return {
        "text": text,
        "tool_use": tool,
        "is_finished": bool(finish),
        "finish_reason": finish,
        "usage": usage,
        "index": 0,
    }


def _tool_piece(arguments: str, first: bool) -> dict[str, Any]:
    return {
        "id": "call_litellm_1" if first else None,
        "type": "function",
        "function": {"name": "read_file" if first else None, "arguments": arguments},
        "index": 0,
    }


class ScriptedTools(CustomLLM):
    """Answers by the script above; anything else gets a one-line complaint."""

    async def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        messages: list[dict[str, Any]] = kwargs.get("messages") or []
        tools = (kwargs.get("optional_params") or {}).get("tools") or []
        offered = [t.get("function", {}).get("name") for t in tools]
        last = messages[-1] if messages else {}
        usage = {"prompt_tokens": 21, "completion_tokens": 9, "total_tokens": 30}
        if last.get("role") == "tool":
            said = f"The note says: {last.get('content')}"
            yield _chunk(text=said[:9])
            yield _chunk(text=said[9:])
            yield _chunk(finish="stop", usage=usage)
        elif "read_file" in offered:
            yield _chunk(tool=_tool_piece('{"pa', first=True))
            yield _chunk(tool=_tool_piece('th": "notes.txt"}', first=False))
            yield _chunk(finish="tool_calls", usage=usage)
        else:
            yield _chunk(text=f"no read_file tool was offered (got {offered})")
            yield _chunk(finish="stop", usage=usage)


scripted_tools = ScriptedTools()

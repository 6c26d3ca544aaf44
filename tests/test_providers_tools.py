"""The file tools through each real provider: offered with schemas the APIs take, called, run.

The model is a scripted server on loopback speaking the provider's own wire
format. It is offered every tool a real model gets; it calls ``edit_file``
(with the boolean ``replace_all``), ``read_file`` with a line range,
``list_dir``, ``glob`` and ``grep`` in one round, and their results go back to
it in the next request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from jsonschema import Draft202012Validator

from agentrt import Model
from agentrt import Outcome
from agentrt import open_runtime
from agentrt.agent.tools import TOOLS
from agentrt.agent.tools import offered_to
from agentrt.models.providers import AnthropicModel
from agentrt.models.providers import OpenAIModel
from agentrt.vocab.terms import Approval

from .conftest import FakeVerifier
from .conftest import Recorder
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import Handler
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import an_tool_block
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_tool
from .fakes.llm_server import oa_usage
from .fakes.llm_server import sse

#: What both APIs take as a tool's name (OpenAI's function name, Anthropic's tool name).
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("edit_file", {"path": "a.txt", "old_string": "x", "new_string": "y", "replace_all": True}),
    ("read_file", {"path": "lines.txt", "offset": 2, "limit": 1}),
    ("list_dir", {"path": "src"}),
    ("glob", {"pattern": "*.py"}),
    ("grep", {"pattern": "needle", "path": "src"}),
]
RESULTS = [
    "edited {workdir}/a.txt: 2 replacements",
    "two\n[lines 2-2 of 3; read on with offset=3]",
    "m.py  10 bytes",
    "src/m.py",
    "src/m.py:1:needle = 1",
]


def openai_script() -> list[Handler]:
    chunks = []
    for index, (name, arguments) in enumerate(CALLS):
        text = json.dumps(arguments)
        chunks += [
            oa_tool(index, id=f"call_{index}", name=name),
            oa_tool(index, arguments=text[:7]),
            oa_tool(index, arguments=text[7:]),
        ]
    return [
        sse([*chunks, oa_finish("tool_calls"), oa_usage(50, 10), OA_DONE]),
        sse([oa_text("Done."), oa_finish(), oa_usage(80, 3), OA_DONE]),
    ]


def anthropic_script() -> list[Handler]:
    blocks = []
    for index, (name, arguments) in enumerate(CALLS):
        text = json.dumps(arguments)
        blocks += an_tool_block(index, f"toolu_{index}", name, [text[:7], text[7:]])
    return [
        sse([an_start(50), *blocks, *an_end("tool_use", 10)]),
        sse([an_start(80), *an_text_block(0, ["Done."]), *an_end()]),
    ]


def openai_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert all(tool["type"] == "function" for tool in body["tools"])
    return {
        tool["function"]["name"]: {
            "description": tool["function"]["description"],
            "schema": tool["function"]["parameters"],
        }
        for tool in body["tools"]
    }


def anthropic_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        tool["name"]: {"description": tool["description"], "schema": tool["input_schema"]}
        for tool in body["tools"]
    }


def openai_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def anthropic_results(body: dict[str, Any]) -> list[str]:
    return [
        block["content"]
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block["type"] == "tool_result"
    ]


Reader = Callable[[dict[str, Any]], Any]
PROVIDERS: dict[str, tuple[Callable[[str], Model], Callable[[], list[Handler]], Reader, Reader]] = {
    "openai": (
        lambda url: OpenAIModel("m", url + "/v1", api_key="sk-test"),
        openai_script,
        openai_tools,
        openai_results,
    ),
    "anthropic": (
        lambda url: AnthropicModel("m", url, api_key="sk-test"),
        anthropic_script,
        anthropic_tools,
        anthropic_results,
    ),
}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_the_file_tools_are_offered_called_and_answered(
    provider: str, llm_server: LLMServer, tmp_path: Path, workdir: Path, verifier: FakeVerifier
) -> None:
    make, script, tools_of, results_of = PROVIDERS[provider]
    (workdir / "a.txt").write_text("x and x\n")
    (workdir / "lines.txt").write_text("one\ntwo\nthree\n")
    (workdir / "src").mkdir()
    (workdir / "src" / "m.py").write_text("needle = 1")
    llm_server.script(*script())
    model = make(llm_server.base_url)
    with trio.fail_after(20):
        async with open_runtime(
            tmp_path / "state",
            model=model,
            workdir=workdir,
            restricted_paths=[],
            verifier=verifier,
            approval=Approval.FULL_AUTO,
        ) as rt:
            ended = await rt.executor.run("cli-tools", "go", owner=object(), emit=Recorder())
    assert ended.outcome is Outcome.FINISHED, ended
    assert ended.text == "Done."
    first, second = (request.json() for request in llm_server.requests)

    offered = tools_of(first)
    assert list(offered) == [spec.name for spec in offered_to(model)]
    for name in ("edit_file", "read_file", "list_dir", "glob", "grep"):
        spec = TOOLS[name].spec()
        assert offered[name] == {"description": spec.description, "schema": spec.parameters}
    for name, tool in offered.items():
        # What both APIs require: a name of their alphabet, and an object schema that is
        # valid JSON Schema, whose required arguments are among its properties.
        assert TOOL_NAME.match(name), name
        assert tool["description"]
        schema = tool["schema"]
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert set(schema["required"]) <= set(schema["properties"])
    # Each call's arguments fit the schema it was offered.
    for name, arguments in CALLS:
        Draft202012Validator(offered[name]["schema"]).validate(arguments)

    # (in the order the calls ended: they run side by side)
    assert sorted(results_of(second)) == sorted(r.format(workdir=workdir) for r in RESULTS)
    assert (workdir / "a.txt").read_text() == "y and y\n"

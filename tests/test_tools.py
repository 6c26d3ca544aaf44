"""Tools are declared once: each argument class gives the schema, the structuring and the errors."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentrt import ReplayModel
from agentrt import ScriptedModel
from agentrt import ToolCall
from agentrt import ToolError
from agentrt import ToolSpec
from agentrt import make_model
from agentrt.agent.tools import TOOLS
from agentrt.agent.tools import find
from agentrt.agent.tools import offered_to
from agentrt.agent.tools.base import Tool
from agentrt.agent.tools.base import argument
from agentrt.agent.tools.files import WriteFile
from agentrt.agent.tools.testing import Big
from agentrt.agent.tools.testing import Sleep
from agentrt.vocab.reprs import record


def _schema(**properties: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
    }


#: What the model is offered, tool by tool.
SPECS = (
    ToolSpec(
        "ask_user", "Ask the human a question and wait for the answer.", _schema(question="string")
    ),
    ToolSpec(
        "write_file",
        "Write text to a file (relative paths are inside the working directory).",
        _schema(path="string", content="string"),
    ),
    ToolSpec(
        "edit_file",
        "Edit a file by replacing an exact piece of its text (relative paths are inside the "
        "working directory). old_string must occur exactly once, unless replace_all is true: "
        "include enough surrounding lines to make it unique. Whitespace and indentation must "
        "match exactly. To create a file, use write_file.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file to edit."},
                "old_string": {"type": "string", "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "The text to put in its place."},
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence (default false).",
                },
            },
            "required": ["path", "old_string", "new_string"],
        },
    ),
    ToolSpec(
        "read_file",
        "Read a text file: at most 2000 lines and 32,000 bytes a call; the result says when "
        "the file goes on, and from which line to read on.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "offset": {
                    "type": "integer",
                    "description": "The first line to read, counting from 1 (default 1).",
                },
                "limit": {
                    "type": "integer",
                    "description": "How many lines to read (default and at most 2000).",
                },
            },
            "required": ["path"],
        },
    ),
    ToolSpec(
        "list_dir",
        "List the entries of a folder, sorted by name: folders end in '/', files show their "
        "size. Entries .gitignore ignores are left out. At most 500 entries.",
        {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The folder (default: the working directory).",
                }
            },
            "required": [],
        },
    ),
    ToolSpec(
        "glob",
        "Find files by a gitignore-style pattern: '*.py' matches at any depth, 'src/*.py' "
        "only directly in src, 'src/**/*.py' anywhere under src. Gives the paths sorted; files "
        ".gitignore ignores are left out. At most 500 paths.",
        {
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The pattern, e.g. '*.py' or 'docs/**/*.md'.",
                },
                "path": {
                    "type": "string",
                    "description": "The folder to search, the pattern relative to it "
                    "(default: the working directory).",
                },
            },
            "required": ["pattern"],
        },
    ),
    ToolSpec(
        "grep",
        "Search the contents of files for a regular expression; gives 'path:line:text', "
        "files sorted by path. Files .gitignore ignores and binary files are skipped. At "
        "most 200 matches.",
        {
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The regular expression (ripgrep's syntax, like Python's).",
                },
                "path": {
                    "type": "string",
                    "description": "The file or folder to search (default: the working directory).",
                },
            },
            "required": ["pattern"],
        },
    ),
    ToolSpec(
        "shell",
        "Run a shell command in the working directory; returns its output and exit status. "
        "It runs in a sandbox: only the working directory and a private /tmp are writable.",
        _schema(command="string"),
    ),
    ToolSpec(
        "store_secret",
        "Ask the human for a secret value and store it under a name; you see only the name.",
        _schema(name="string"),
    ),
    ToolSpec("sleep", "Wait for a number of seconds.", _schema(seconds="number")),
    ToolSpec(
        "big",
        "Produce a result of the given size in bytes (for testing).",
        _schema(size="integer"),
    ),
    ToolSpec(
        "spawn", "Run a task in a subagent and return its final answer.", _schema(task="string")
    ),
)


def test_every_tool_offers_the_schema_it_always_had() -> None:
    assert tuple(tool.spec() for tool in TOOLS.values()) == SPECS


def test_a_spec_is_read_from_its_annotations_text_without_compiling_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Resolving the annotations through typing compiles each one: building the dozen specs
    # took a millisecond of every start that way. They are read as written instead.
    @record
    class Count(Tool):
        NAME = "count"
        DESCRIPTION = "Count up to a number."
        upto: int = argument("where to stop")
        step: float = 1.0
        label: str = ""
        loud: bool = False

    compiled: list[object] = []
    real_compile = builtins.compile

    def counted(*args: Any, **kwargs: Any) -> Any:
        compiled.append(args[0])
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counted)
    assert Count.spec() == ToolSpec(
        "count",
        "Count up to a number.",
        {
            "type": "object",
            "properties": {
                "upto": {"type": "integer", "description": "where to stop"},
                "step": {"type": "number"},
                "label": {"type": "string"},
                "loud": {"type": "boolean"},
            },
            "required": ["upto"],
        },
    )
    assert compiled == []
    # Parsing still reads them through cattrs, which resolves them once.
    assert Count.parse(ToolCall("c", "count", {"upto": 3, "loud": True})) == Count(3, loud=True)


def test_a_tool_argument_of_another_type_is_refused_when_its_spec_is_made() -> None:
    @record
    class Listing(Tool):
        NAME = "listing"
        DESCRIPTION = "Takes a list."
        items: list[str] = attrs.field(factory=list)

    with pytest.raises(AssertionError, match="a tool argument is a str, int, float or bool"):
        Listing.spec()


def test_script_players_get_every_tool_and_real_models_not_the_testing_ones(
    tmp_path: Path,
) -> None:
    replay = tmp_path / "r.json"
    replay.write_text('{"turns": []}')
    for player in (ScriptedModel(), ReplayModel.from_file(replay)):
        assert offered_to(player) == SPECS
    for spec in ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"):
        real = make_model(spec, base_url="http://127.0.0.1:9")
        names = [tool.name for tool in offered_to(real)]
        assert names == [
            "ask_user",
            "write_file",
            "edit_file",
            "read_file",
            "list_dir",
            "glob",
            "grep",
            "shell",
            "store_secret",
            "spawn",
        ]


def test_arguments_are_structured_into_the_tools_class() -> None:
    assert Sleep.parse(ToolCall("c", "sleep", {"seconds": 2})) == Sleep(2.0)
    assert Big.parse(ToolCall("c", "big", {"size": 3, "extra": "ignored"})) == Big(3)
    write = WriteFile.parse(ToolCall("c", "write_file", {"path": "a", "content": "b"}))
    assert (write.path, write.content) == ("a", "b")


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("sleep", {"seconds": True}, "sleep needs 'seconds' as a float"),
        ("sleep", {"seconds": "1"}, "sleep needs 'seconds' as a float"),
        ("big", {"size": 1.0}, "big needs 'size' as a int"),
        ("big", {}, "big needs 'size' as a int"),
        ("write_file", {"path": "a"}, "write_file needs 'content' as a str"),
        ("write_file", {"content": 5}, "write_file needs 'path' as a str"),
        ("ask_user", {"question": None}, "ask_user needs 'question' as a str"),
        ("edit_file", {"path": "a", "old_string": "x"}, "edit_file needs 'new_string' as a str"),
        (
            "edit_file",
            {"path": "a", "old_string": "x", "new_string": "y", "replace_all": 1},
            "edit_file needs 'replace_all' as a bool",
        ),
        ("read_file", {"path": "a", "offset": "3"}, "read_file needs 'offset' as a int"),
        ("grep", {"path": "."}, "grep needs 'pattern' as a str"),
    ],
)
def test_a_missing_or_mistyped_argument_is_named(
    name: str, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolError, match=f"^{message}$"):
        find(name).parse(ToolCall("c", name, arguments))


def test_an_unknown_tool_lists_the_tools() -> None:
    with pytest.raises(ToolError, match="unknown tool 'fly'; the tools are: ask_user, write_file"):
        find("fly")

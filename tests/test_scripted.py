"""The embedded scripted model's grammar and the replay model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt import Message
from agentrt import ModelError
from agentrt import ReplayModel
from agentrt import ScriptedModel
from agentrt import TextDelta
from agentrt.models.messages import ModelDelta
from agentrt.models.scripted import parse_statement
from agentrt.models.scripted import split_statements


def test_statements_split_on_semicolons_outside_braces() -> None:
    assert split_statements("a; spawn {b; c}; ; d") == ["a", "spawn {b; c}", "d"]


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("ask What now?", ("ask_user", {"question": "What now?"})),
        ("write a.txt hello world", ("write_file", {"path": "a.txt", "content": "hello world"})),
        ("sh ls -l", ("shell", {"command": "ls -l"})),
        ("read a.txt", ("read_file", {"path": "a.txt"})),
        ("read a.txt 10", ("read_file", {"path": "a.txt", "offset": 10})),
        ("read a.txt 10 20", ("read_file", {"path": "a.txt", "offset": 10, "limit": 20})),
        ("read my notes.txt", ("read_file", {"path": "my notes.txt"})),
        ("read 2024 1", ("read_file", {"path": "2024", "offset": 1})),
        (
            "edit a.txt 'port = 80' \"port = 8080\"",
            (
                "edit_file",
                {"path": "a.txt", "old_string": "port = 80", "new_string": "port = 8080"},
            ),
        ),
        (
            "edit a.txt x y all",
            (
                "edit_file",
                {"path": "a.txt", "old_string": "x", "new_string": "y", "replace_all": True},
            ),
        ),
        (
            "edit a.txt x",
            "(scripted model: edit needs a path, the old text and the new: "
            "edit PATH OLD NEW [all])",
        ),
        (
            "edit a.txt 'x y",
            "(scripted model: edit PATH OLD NEW [all]: No closing quotation)",
        ),
        ("ls", ("list_dir", {"path": "."})),
        ("ls src", ("list_dir", {"path": "src"})),
        ("glob *.py", ("glob", {"pattern": "*.py"})),
        ("glob '**/*.md' docs", ("glob", {"pattern": "**/*.md", "path": "docs"})),
        ("grep 'def \\w+' src", ("grep", {"pattern": "def \\w+", "path": "src"})),
        (
            "grep a b c",
            "(scripted model: grep takes a pattern and a path: quote a pattern with spaces)",
        ),
        ("secret token", ("store_secret", {"name": "token"})),
        ("sleep 2.5", ("sleep", {"seconds": 2.5})),
        ("big 100", ("big", {"size": 100})),
        ("spawn {read a; read b}", ("spawn", {"task": "read a; read b"})),
        ("hello there", "hello there"),
        ("sleep soon", "(scripted model: expected a number in 'sleep SECONDS', got 'soon')"),
    ],
)
def test_each_statement_of_the_grammar(statement: str, expected: object) -> None:
    assert parse_statement(statement) == expected


async def test_tool_statements_become_parallel_calls_of_one_round() -> None:
    deltas: list[ModelDelta] = []

    async def collect(delta: ModelDelta) -> None:
        deltas.append(delta)

    model = ScriptedModel(word_delay=0, stream_delay=0)
    response = await model.complete([Message.user("hi you; read a; ask b?")], [], collect)
    assert [c.name for c in response.tool_calls] == ["read_file", "ask_user"]
    assert len({c.id for c in response.tool_calls}) == 2
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "hi you"


async def test_fail_makes_the_model_fail_after_what_came_before() -> None:
    said: list[str] = []

    async def collect(delta: ModelDelta) -> None:
        assert isinstance(delta, TextDelta)
        said.append(delta.text)

    model = ScriptedModel(0, 0)
    with pytest.raises(ModelError, match=r"^the provider is down$"):
        await model.complete([Message.user("hello; fail the provider is down")], [], collect)
    assert "".join(said) == "hello"
    with pytest.raises(ModelError, match="told to fail"):
        await model.complete([Message.user("fail")], [], collect)


async def test_stream_n_streams_n_words() -> None:
    words: list[str] = []

    async def collect(delta: ModelDelta) -> None:
        assert isinstance(delta, TextDelta)
        words.append(delta.text)

    response = await ScriptedModel(0, 0).complete([Message.user("stream 7")], [], collect)
    assert len(words) == 7
    assert response.text == "word1 word2 word3 word4 word5 word6 word7"


async def _ignore(delta: ModelDelta) -> None:
    del delta


async def test_replay_model_plays_turns_in_order(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "text": "first",
                        "tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}],
                    },
                    {"text": "second"},
                ]
            }
        )
    )
    model = ReplayModel.from_file(path)
    one = await model.complete([Message.user("go")], [], _ignore)
    assert one.tool_calls[0].name == "read_file"
    two = await model.complete([Message.user("go"), one.as_message()], [], _ignore)
    assert two.text == "second"
    with pytest.raises(ModelError, match="the script has 2 turns and all were played"):
        await model.complete([Message.user("go"), one.as_message(), two.as_message()], [], _ignore)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "cannot read replay file"),
        ('{"turns": 3}', "expected an object with a 'turns' list"),
        ('{"turns": [{"tool_calls": [{"arguments": {}}]}]}', "turn 0 call 0 needs a 'name'"),
    ],
)
def test_a_bad_replay_file_is_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        ReplayModel.from_file(path)


async def test_the_streamed_text_matches_the_response_text() -> None:
    streamed: list[str] = []

    async def collect(delta: ModelDelta) -> None:
        assert isinstance(delta, TextDelta)
        streamed.append(delta.text)

    response = await ScriptedModel(0, 0).complete(
        [Message.user("hello there; stream 2; bye")], [], collect
    )
    assert "".join(streamed) == response.text == "hello there\nword1 word2\nbye"

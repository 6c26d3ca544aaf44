"""Reading a peer's JSON: integers read in C, a too-long one refused with a message that helps."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from agentrt.vocab import peerjson
from agentrt.vocab.peerjson import JsonNumberError
from agentrt.vocab.peerjson import loads


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The integers read through the checking decoder (each a Python call), in order."""
    seen: list[str] = []

    def parse_int(text: str) -> int:
        seen.append(text)
        return peerjson._parse_int(text)

    monkeypatch.setattr(peerjson, "_CHECKING", json.JSONDecoder(parse_int=parse_int))
    return seen


@pytest.fixture
def int_limit() -> Iterator[None]:
    """Restores the interpreter's limit on integer digits after the test."""
    before = sys.get_int_max_str_digits()
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)


def test_integers_are_read_without_a_python_call_each(counted: list[str]) -> None:
    times = list(range(1_733_500_000, 1_733_501_000))
    text = json.dumps({"lines": ["a"] * 1000, "times": times, "next": None, "n": -7})
    assert loads(text) == {"lines": ["a"] * 1000, "times": times, "next": None, "n": -7}
    assert loads(text.encode()) == json.loads(text)
    assert counted == []


def test_an_integer_of_4300_digits_is_read_and_one_of_4301_refused(counted: list[str]) -> None:
    assert loads("[" + "9" * 4300 + "]") == [10**4300 - 1]
    assert loads("-" + "9" * 4300) == -(10**4300 - 1)
    with pytest.raises(JsonNumberError) as refused:
        loads('{"a": [1, 2, -' + "9" * 4301 + "]}")
    assert str(refused.value) == (
        "an integer of 4301 digits is longer than the 4300 digits accepted; "
        "send long numbers as strings"
    )
    # The C decoder's bare error made the text be read once more, checking each integer.
    assert counted == ["1", "2", "-" + "9" * 4301]


def test_malformed_json_is_not_read_twice(counted: list[str]) -> None:
    with pytest.raises(json.JSONDecodeError):
        loads('{"a": 1,')
    with pytest.raises(json.JSONDecodeError, match="BOM"):
        loads('\ufeff{"a": 1}')
    with pytest.raises(UnicodeDecodeError):
        loads(b'{"a": "\xff"}')
    assert counted == []


@pytest.mark.usefixtures("int_limit")
def test_an_unlimited_interpreter_still_refuses_past_4300_digits(counted: list[str]) -> None:
    sys.set_int_max_str_digits(0)  # no limit: a long number would take quadratic time
    with pytest.raises(JsonNumberError, match="an integer of 5000 digits is longer than the 4300"):
        loads("1" * 5000)
    assert loads("[12, 34]") == [12, 34]
    assert counted == ["1" * 5000, "12", "34"]


@pytest.mark.usefixtures("int_limit")
def test_a_lower_limit_of_the_interpreter_is_said_as_such(counted: list[str]) -> None:
    sys.set_int_max_str_digits(1000)
    with pytest.raises(JsonNumberError) as refused:
        loads("[" + "1" * 2000 + "]")
    assert str(refused.value) == (
        "an integer of 2000 digits is too long to read; send long numbers as strings"
    )
    value: Any = loads("[" + "1" * 1000 + "]")
    assert value == [int("1" * 1000)]

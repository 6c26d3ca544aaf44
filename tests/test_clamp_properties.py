"""Properties of snapshot clamping, checked over generated text and JSON values."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import assume
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agentrt.vocab.clamp import MARKER_RE
from agentrt.vocab.clamp import clamp
from agentrt.vocab.clamp import clamp_arguments
from agentrt.vocab.clamp import was_clamped

#: Characters of every UTF-8 length (1 to 4 bytes), so cuts land inside characters often.
_MIXED = st.text(alphabet="ab\u00e9\u00df\u4e2d\u6587\U0001f600\U0001f9ea\u0301 ", max_size=300)
TEXT = st.one_of(st.text(max_size=300), _MIXED)
#: Text long enough that clamping it to the marker's room removes something.
LONG_TEXT = st.one_of(
    st.text(min_size=30, max_size=300),
    st.text(alphabet="ab\u00e9\u4e2d\U0001f600", min_size=30, max_size=300),
)
#: Lone surrogates, which the store keeps with ``surrogatepass``.
SURROGATE_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        st.sampled_from("a\u00e9\U0001f600"),
    ),
    max_size=100,
)


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _marker_room(text: str) -> int:
    """The bytes the marker needs when everything is removed (its widest form)."""
    return len(f"...[{_size(text)} bytes elided]...")


def _splits(original: str, result: str) -> list[tuple[str, int, str]]:
    """Every (head, N, tail) reading of `result` whose head and tail come from `original`."""
    found = []
    for match in MARKER_RE.finditer(result):
        head, tail = result[: match.start()], result[match.end() :]
        if original.startswith(head) and original.endswith(tail):
            found.append((head, int(match.group(1)), tail))
    return found


def _check_clamped(original: str, limit: int) -> None:
    result = clamp(original, limit)
    if _size(original) <= limit:
        assert result == original
        return
    if limit >= _marker_room(original):
        assert _size(result) <= limit
    readings = _splits(original, result)
    assert readings, f"no head/marker/tail reading of {result!r}"
    # Some reading must account for exactly the bytes removed, head and tail whole.
    assert any(
        n == _size(original) - _size(head) - _size(tail)
        and _size(head) + _size(tail) < _size(original)
        for head, n, tail in readings
    )
    # Never splits a character: the result survives an encode/decode round trip.
    data = result.encode("utf-8", "surrogatepass")
    assert data.decode("utf-8", "surrogatepass") == result


@given(TEXT, st.integers(min_value=0, max_value=1200))
@settings(max_examples=400)
def test_clamp_keeps_head_and_tail_and_counts_removed_bytes(text: str, limit: int) -> None:
    _check_clamped(text, limit)


@given(SURROGATE_TEXT, st.integers(min_value=0, max_value=400))
def test_clamp_handles_lone_surrogates_like_any_character(text: str, limit: int) -> None:
    _check_clamped(text, limit)


@given(LONG_TEXT, st.data())
def test_clamp_fits_the_limit_whenever_the_marker_fits(text: str, data: st.DataObject) -> None:
    assume(_size(text) > _marker_room(text))
    limit = data.draw(st.integers(min_value=_marker_room(text), max_value=_size(text)))
    result = clamp(text, limit)
    assert _size(result) <= limit
    assert result.encode("utf-8").decode("utf-8") == result


@given(TEXT, st.integers(min_value=0, max_value=4096))
def test_clamp_is_the_identity_when_the_text_fits(text: str, slack: int) -> None:
    assert clamp(text, _size(text) + slack) is text
    assert not was_clamped(clamp(text, _size(text) + slack)) or was_clamped(text)


@given(st.one_of(TEXT, LONG_TEXT))
def test_clamped_text_is_marked_and_unclamped_text_is_not(text: str) -> None:
    assume(not was_clamped(text))
    assert not was_clamped(clamp(text, _size(text)))
    if _size(text) > _marker_room(text):
        assert was_clamped(clamp(text, _marker_room(text)))


@given(st.text(alphabet="\U0001f600", min_size=60, max_size=200), st.integers(30, 239))
def test_clamp_never_keeps_part_of_a_four_byte_character(text: str, limit: int) -> None:
    result = clamp(text, limit)
    marker = MARKER_RE.search(result)
    assert marker is not None
    assert re.fullmatch("\U0001f600*", result[: marker.start()])
    assert re.fullmatch("\U0001f600*", result[marker.end() :])


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


def _check_arguments(original: Any, clamped: Any, limit: int) -> None:
    if isinstance(original, str):
        assert clamped == clamp(original, limit)
    elif isinstance(original, dict):
        assert isinstance(clamped, dict)
        assert list(clamped) == list(original)
        for key, value in original.items():
            _check_arguments(value, clamped[key], limit)
    elif isinstance(original, list):
        assert isinstance(clamped, list)
        assert len(clamped) == len(original)
        for before, after in zip(original, clamped, strict=True):
            _check_arguments(before, after, limit)
    else:
        assert clamped is original


@given(JSON, st.integers(min_value=0, max_value=300))
def test_clamp_arguments_clamps_every_string_and_keeps_the_shape(value: Any, limit: int) -> None:
    clamped = clamp_arguments(value, limit)
    _check_arguments(value, clamped, limit)
    json.dumps(clamped, ensure_ascii=False).encode("utf-8")


@given(JSON)
def test_clamp_arguments_changes_nothing_that_fits(value: Any) -> None:
    limit = max((_size(s) for s in _strings(value)), default=0)
    assert clamp_arguments(value, limit) == value


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []

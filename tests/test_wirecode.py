"""The compiled frame codec (`agentrt.protocol.wirecode`) agrees with the converter on every frame.

The converter (cattrs) defines each frame's JSON object and which objects are
frames. The compiled functions must give the same object for every frame, read
every valid frame themselves (else they would not be used), and for anything
else either give exactly the converter's frame or leave the object to it.
"""

from __future__ import annotations

import enum
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any
from typing import Union
from typing import get_args
from typing import get_origin

import attrs
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agentrt import Cause
from agentrt.protocol.codec import FrameCodec
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import CLIENT_FRAMES
from agentrt.protocol.frames import DAEMON_FRAMES
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import ClientFrame
from agentrt.protocol.frames import DaemonFrame
from agentrt.protocol.frames import FrameError
from agentrt.protocol.frames import PendingList
from agentrt.protocol.frames import _decoder
from agentrt.protocol.frames import _encoder
from agentrt.protocol.frames import from_wire
from agentrt.protocol.frames import from_wire_slow
from agentrt.protocol.frames import to_wire
from agentrt.protocol.frames import to_wire_slow

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def _values(kind: Any) -> st.SearchStrategy[Any]:
    """Valid values of a frame field of type `kind`."""
    origin = get_origin(kind)
    if origin is Union or origin is type(str | None):
        return st.one_of(*(_values(arg) for arg in get_args(kind)))
    if kind is type(None):
        return st.none()
    if kind is str:
        return st.text(max_size=20)
    if kind is bool:
        return st.booleans()
    if kind is int:
        return st.integers()
    if kind is float:
        return st.floats(allow_nan=False)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return st.sampled_from(list(kind))
    if origin is tuple:
        return st.lists(_values(get_args(kind)[0]), max_size=3).map(tuple)
    if origin is dict:
        value = get_args(kind)[1] if get_args(kind) else Any
        values = JSON_VALUES if value is Any else _values(value)
        return st.dictionaries(st.text(max_size=5), values, max_size=3)
    if attrs.has(kind):
        return _instances(kind)
    raise AssertionError(f"no strategy for {kind!r}")


def _instances(cls: type) -> st.SearchStrategy[Any]:
    attrs.resolve_types(cls)
    fields = {f.name: _values(f.type) for f in attrs.fields(cls)}
    if cls is Cancel:
        # Its validator allows a cancel's causes only, and `pause` only with cause pause.
        fields.pop("cause")
        return st.builds(cls, **fields)
    return st.builds(cls, **fields)


def _same(one: Any, other: Any) -> bool:
    """Equal in every field, those left out of ``==`` too (a cancel's `pause`)."""
    return type(one) is type(other) and attrs.astuple(one) == attrs.astuple(other)


def _union(cls: type) -> Any:
    return ClientFrame if cls in CLIENT_FRAMES else DaemonFrame


ALL_FRAMES: list[Any] = [*CLIENT_FRAMES, *DAEMON_FRAMES]
FAST = settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def for_every_frame(test: Callable[[Any, st.DataObject], None]) -> Any:
    """`test(cls, data)` for each frame class, with hypothesis drawing from `data`."""
    drawn = FAST(given(data=st.data())(test))
    return pytest.mark.parametrize("cls", ALL_FRAMES, ids=lambda cls: f"{cls.TYPE}-{cls.__name__}")(
        drawn
    )


@for_every_frame
def test_every_frame_encodes_as_the_converter_does_and_decodes_without_it(
    cls: Any, data: st.DataObject
) -> None:
    frame = data.draw(_instances(cls))
    wire = to_wire(frame)
    assert wire == to_wire_slow(frame)
    assert next(iter(wire)) == "type"
    parsed = json.loads(encode(frame))
    assert parsed == json.loads(json.dumps(wire))  # short strings: nothing was shortened
    fast = _decoder(cls)(parsed)
    assert fast is not None, f"the compiled decoder left a valid {cls.TYPE!r} frame: {parsed}"
    assert _same(fast, from_wire_slow(parsed, _union(cls)))
    assert _same(fast, frame) or cls is Cancel


def _mutations(cls: Any) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects of `cls`'s type that are often not valid frames."""

    def mutate(wire: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
        wire = dict(wire)
        names = [name for name in wire if name != "type"]
        for _ in range(data.draw(st.integers(1, 3))):
            how = data.draw(st.sampled_from(["drop", "add", "replace"]))
            if how == "drop" and names:
                wire.pop(data.draw(st.sampled_from(names)), None)
            elif how == "add":
                wire[data.draw(st.text(max_size=6))] = data.draw(JSON_VALUES)
            elif names:
                wire[data.draw(st.sampled_from(names))] = data.draw(
                    JSON_VALUES | st.sampled_from(["\ud800", "x\udfff", 1.0, True, 7])
                )
        wire["type"] = cls.TYPE
        return wire

    return st.builds(mutate, _instances(cls).map(to_wire_slow), st.data())


@for_every_frame
def test_the_compiled_decoder_gives_the_converters_frame_or_leaves_it_to_it(
    cls: type, data: st.DataObject
) -> None:
    wire = data.draw(_mutations(cls))
    union = _union(cls)
    try:
        expected: Any = from_wire_slow(wire, union)
    except FrameError as exc:
        expected = exc
    fast = _decoder(cls)(wire)
    if fast is not None:
        assert not isinstance(expected, FrameError), f"accepted what the converter refuses: {wire}"
        assert _same(fast, expected)
    if isinstance(expected, FrameError):
        with pytest.raises(FrameError) as caught:
            from_wire(wire, union)
        got = caught.value
        assert (got.code, str(got), got.ref) == (expected.code, str(expected), expected.ref)
    else:
        assert _same(from_wire(wire, union), expected)


def test_lone_surrogates_wrong_types_and_unknown_fields_are_left_to_the_converter() -> None:
    decode = _decoder(Cancel)
    assert _same(
        decode({"type": "cancel", "task": "t1", "cause": "pause"}), Cancel("t1", Cause.PAUSE)
    )
    # The older spelling of a pause is left to the converter, whose hook reads it.
    older = {"type": "cancel", "task": "t1", "pause": True}
    assert decode(older) is None
    assert from_wire(older, ClientFrame) == Cancel("t1", Cause.PAUSE)
    for wire in (
        {"type": "cancel", "task": "\ud800"},
        {"type": "cancel", "task": 5},
        {"type": "cancel", "task": "t1", "pause": 1},
        {"type": "cancel", "task": "t1", "cause": "disconnect"},
        {"type": "cancel", "task": "t1", "cause": "nonsense"},
        {"type": "cancel", "task": "t1", "extra": 1},
        {"type": "cancel"},
    ):
        assert decode(wire) is None, wire
        with pytest.raises(FrameError):
            from_wire(wire, ClientFrame)


def test_a_cancel_sends_its_cause_and_not_the_older_pause_field() -> None:
    assert _encoder(Cancel)(Cancel("t1", Cause.PAUSE)) == {
        "type": "cancel",
        "task": "t1",
        "cause": "pause",
    }


def test_a_codec_reads_lines_split_anywhere_and_many_in_one_read() -> None:
    frames = [Cancel(f"t{i}", (Cause.PAUSE, Cause.USER_CANCEL)[i % 2]) for i in range(5)]
    data = b"".join(encode(frame) for frame in frames)
    for size in (1, 7, len(data)):
        codec = FrameCodec.for_daemon()
        for start in range(0, len(data), size):
            codec.feed(data[start : start + size])
        assert [codec.next_frame() for _ in frames] == frames


def test_frames_of_plain_fields_need_no_converter_at_all() -> None:
    """A client saying hello (the terminal UI starting) does not load or build cattrs."""
    program = (
        "import sys\n"
        "from agentrt.codec import FrameCodec, encode\n"
        "from agentrt.frames import Hello\n"
        "codec = FrameCodec.for_client()\n"
        'codec.feed(b\'{"type":"hello","version":1,"daemon_version":"1","window":"w"}\\n\')\n'
        "print(encode(Hello(1, 'w')).decode().strip(), codec.next_frame())\n"
        "print('cattrs' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.splitlines() == [
        '{"type":"hello","version":1,"window":"w","scope":"window"} '
        "Welcome(version=1, daemon_version='1', window='w')",
        "False",
    ]


@FAST
@given(data=st.data())
def test_a_bad_field_inside_a_listed_task_is_left_to_the_converter(data: st.DataObject) -> None:
    """The compiled decoder reads the classes inside a frame (a page of tasks) as strictly."""
    page = data.draw(_instances(PendingList).filter(lambda page: len(page.tasks) > 0))
    wire = json.loads(json.dumps(to_wire(page)))
    task = data.draw(st.sampled_from(wire["tasks"]))
    how = data.draw(st.sampled_from(["drop", "add", "replace"]))
    name = data.draw(st.sampled_from(sorted(task)))
    if how == "drop":
        del task[name]
    elif how == "add":
        task[data.draw(st.text(min_size=1, max_size=6))] = data.draw(JSON_VALUES)
    else:
        task[name] = data.draw(JSON_VALUES | st.sampled_from(["\ud800", 1.5, True, 7, None]))
    try:
        expected: Any = from_wire_slow(wire, DaemonFrame)
    except FrameError as exc:
        expected = exc
    fast = _decoder(PendingList)(wire)
    if isinstance(expected, FrameError):
        assert fast is None
        with pytest.raises(FrameError) as caught:
            from_wire(wire, DaemonFrame)
        assert str(caught.value) == str(expected)
    else:
        assert fast is None or _same(fast, expected)
        assert _same(from_wire(wire, DaemonFrame), expected)

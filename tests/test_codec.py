"""The sans-I/O line codec: framing, size cap, errors that do not stop the stream."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt import Cause
from agentrt.protocol.codec import EOF
from agentrt.protocol.codec import MAX_FRAME_SIZE
from agentrt.protocol.codec import NEED_DATA
from agentrt.protocol.codec import CodecClosedError
from agentrt.protocol.codec import FrameCodec
from agentrt.protocol.codec import ProtocolError
from agentrt.protocol.codec import encode
from agentrt.protocol.frames import CANCEL_CAUSES
from agentrt.protocol.frames import AnswerFrame
from agentrt.protocol.frames import Cancel
from agentrt.protocol.frames import ClientFrame
from agentrt.protocol.frames import ErrorCode
from agentrt.protocol.frames import ErrorFrame
from agentrt.protocol.frames import Hello
from agentrt.protocol.frames import PendingAction
from agentrt.protocol.frames import PendingRequest
from agentrt.protocol.frames import Run
from agentrt.protocol.frames import UsageFrame

Item = ClientFrame | ProtocolError | str


def drain(codec: FrameCodec[ClientFrame]) -> list[Item]:
    out: list[Item] = []
    while True:
        item = codec.next_frame()
        if item is NEED_DATA:
            return out
        if item is EOF:
            out.append("EOF")
            return out
        out.append(item)


def decode_in_chunks(
    data: bytes, cuts: list[int], max_frame_size: int = MAX_FRAME_SIZE
) -> list[Item]:
    codec = FrameCodec.for_daemon(max_frame_size=max_frame_size)
    out: list[Item] = []
    last = 0
    for cut in [*sorted(cuts), len(data)]:
        if cut > last:
            codec.feed(data[last:cut])
            out += drain(codec)
        last = cut
    codec.feed(b"")
    return out + drain(codec)


FRAMES: list[ClientFrame] = [
    Hello(1, "w\u00e9-\U0001f600"),
    Run("line one\nline two", session="cli-x"),
    AnswerFrame("q1", "allow", secret="p\u00e4ss"),
    Cancel("t-1", Cause.PAUSE),
    PendingRequest(PendingAction.RESUME, session="cli-x", answer="yes"),
]
STREAM = (
    b"".join(encode(f) for f in FRAMES)
    + b'{"type":"bogus"}\n'
    + b"not json\n"
    + encode(Cancel("t-2"))
)


def test_encode_is_one_line() -> None:
    line = encode(Run("a\nb"))
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == {"type": "run", "text": "a\nb", "session": None, "cwd": None}


def test_whole_stream_decodes() -> None:
    out = decode_in_chunks(STREAM, [])
    assert out[: len(FRAMES)] == FRAMES
    bogus, junk, last, eof = out[len(FRAMES) :]
    assert isinstance(bogus, ProtocolError)
    assert bogus.code is ErrorCode.UNKNOWN_TYPE
    assert isinstance(junk, ProtocolError)
    assert junk.code is ErrorCode.MALFORMED
    assert junk.message.startswith("malformed JSON: Expecting value at column 1")
    assert last == Cancel("t-2")
    assert eof == "EOF"


def test_split_at_every_byte_offset_gives_the_same_frames() -> None:
    expected = decode_in_chunks(STREAM, [])
    for cut in range(len(STREAM) + 1):
        assert decode_in_chunks(STREAM, [cut]) == expected, cut


def test_byte_at_a_time() -> None:
    assert decode_in_chunks(STREAM, list(range(len(STREAM)))) == decode_in_chunks(STREAM, [])


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=20))
def test_any_chunking_gives_the_same_frames(cuts: list[int]) -> None:
    assert decode_in_chunks(STREAM, cuts) == decode_in_chunks(STREAM, [])


@given(
    st.lists(
        st.builds(Run, st.text(), st.none() | st.text(max_size=10))
        | st.builds(Cancel, st.text(max_size=12), st.sampled_from(CANCEL_CAUSES))
        | st.builds(AnswerFrame, st.text(max_size=8), st.text(), st.none() | st.text()),
        max_size=8,
    ),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=10),
)
def test_encoded_frames_decode_to_themselves(frames: list[ClientFrame], cuts: list[int]) -> None:
    data = b"".join(encode(f) for f in frames)
    assert decode_in_chunks(data, [c for c in cuts if c <= len(data)]) == [*frames, "EOF"]


def test_oversized_line_is_skipped_and_reported() -> None:
    big = b'{"type":"run","text":"' + b"x" * 200 + b'"}\n'
    data = encode(Cancel("a")) + big + encode(Cancel("b"))
    for cut in range(len(data) + 1):
        out = decode_in_chunks(data, [cut], max_frame_size=100)
        assert out[0] == Cancel("a")
        assert isinstance(out[1], ProtocolError)
        assert out[1].code is ErrorCode.TOO_LARGE
        assert "longer than 100 bytes" in out[1].message
        assert out[2:] == [Cancel("b"), "EOF"]


def test_line_exactly_at_the_cap_is_accepted() -> None:
    line = encode(Run("x" * 50))
    size = len(line) - 1
    assert decode_in_chunks(line, [], max_frame_size=size) == [Run("x" * 50), "EOF"]
    assert isinstance(decode_in_chunks(line, [], max_frame_size=size - 1)[0], ProtocolError)


def test_oversized_line_is_not_buffered_whole() -> None:
    codec = FrameCodec.for_daemon()
    chunk = b"y" * 65536
    for _ in range(3 * MAX_FRAME_SIZE // len(chunk)):
        codec.feed(chunk)
        assert codec.buffered <= MAX_FRAME_SIZE
    first = codec.next_frame()
    assert isinstance(first, ProtocolError)
    assert first.code is ErrorCode.TOO_LARGE
    assert codec.next_frame() is NEED_DATA
    codec.feed(b"tail\n" + encode(Cancel("after")))
    assert codec.next_frame() == Cancel("after")


def test_truncated_last_line_is_reported() -> None:
    out = decode_in_chunks(b'{"type":"cancel","task":"t"}', [])
    assert isinstance(out[0], ProtocolError)
    assert out[0].code is ErrorCode.TRUNCATED
    assert out[1] == "EOF"


def test_blank_lines_are_ignored() -> None:
    assert decode_in_chunks(b"\n  \r\n" + encode(Cancel("t")), []) == [Cancel("t"), "EOF"]


def test_invalid_utf8_is_malformed() -> None:
    out = decode_in_chunks(b'{"type":"run","text":"\xff"}\n', [])
    assert isinstance(out[0], ProtocolError)
    assert out[0].code is ErrorCode.MALFORMED


def test_deeply_nested_json_is_malformed_not_a_crash() -> None:
    out = decode_in_chunks(b"[" * 100000 + b"]" * 100000 + b"\n", [], max_frame_size=300000)
    assert isinstance(out[0], ProtocolError)
    assert out[0].code is ErrorCode.MALFORMED


def test_an_integer_of_5000_digits_is_malformed_and_the_next_frame_still_decodes() -> None:
    huge = b"1" * 5000
    line = b'{"type":"cancel","task":"t","pause":' + huge + b"}\n"
    out = decode_in_chunks(line + encode(Cancel("t")), [])
    assert out[0] == ProtocolError(
        ErrorCode.MALFORMED,
        "malformed JSON: an integer of 5000 digits is longer than the 4300 digits accepted; "
        "send long numbers as strings",
    )
    assert out[1:] == [Cancel("t"), "EOF"]
    # The client's side reads the daemon's frames with the same care.
    client = FrameCodec.for_client()
    client.feed(b'{"type":"usage","task":"t","input_tokens":-' + huge + b',"output_tokens":0}\n')
    refused = client.next_frame()
    assert isinstance(refused, ProtocolError)
    assert refused.code is ErrorCode.MALFORMED


def test_an_integer_of_4300_digits_is_still_read() -> None:
    codec = FrameCodec.for_client()
    codec.feed(
        b'{"type":"usage","task":"t","input_tokens":' + b"9" * 4300 + b',"output_tokens":0}\n'
    )
    frame = codec.next_frame()
    assert isinstance(frame, UsageFrame)
    assert frame.input_tokens == 10**4300 - 1


def test_protocol_error_becomes_error_frame() -> None:
    err = ProtocolError(ErrorCode.INVALID, "expected int @ $.x", ref="hello")
    assert err.to_frame() == ErrorFrame(ErrorCode.INVALID, "expected int @ $.x", "hello")


def test_need_data_until_newline() -> None:
    codec = FrameCodec.for_daemon()
    assert codec.next_frame() is NEED_DATA
    codec.feed(b'{"type":"cancel",')
    assert codec.next_frame() is NEED_DATA
    codec.feed(b'"task":"t"}\n')
    assert codec.next_frame() == Cancel("t")
    assert codec.next_frame() is NEED_DATA


def test_feed_after_eof_fails_fast() -> None:
    codec = FrameCodec.for_daemon()
    codec.feed(b"")
    assert codec.next_frame() is EOF
    assert codec.next_frame() is EOF
    with pytest.raises(CodecClosedError, match="make a new codec"):
        codec.feed(b"x")


def test_client_codec_reads_daemon_frames() -> None:
    codec = FrameCodec.for_client()
    codec.feed(encode(ErrorFrame(ErrorCode.STATE, "say hello first")))
    assert codec.next_frame() == ErrorFrame(ErrorCode.STATE, "say hello first")
    codec.feed(encode(Cancel("t")))
    bad = codec.next_frame()
    assert isinstance(bad, ProtocolError)
    assert bad.code is ErrorCode.UNKNOWN_TYPE

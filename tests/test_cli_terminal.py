"""Control characters in what `agentrt` prints are shown, never passed to the terminal.

Model text, tool text, question prompts, stored messages (one posted over
HTTP too), configuration values, key names and fleet rows hold OSC 0 (the
window title), OSC 52 (the clipboard), ``ESC[2J`` (clear screen), the C1 CSI
U+009B, BEL, backspace and DEL. Every command is run as a real process, with
and without a daemon where it can go through one; its bytes are read as a
terminal would get them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from agentrt.http import load_or_create_token
from agentrt.vocab.terminal import dumps
from agentrt.vocab.terminal import visible

from .cli_process import AGENTRT
from .cli_process import env_for
from .cli_process import read_match
from .cli_process import run

#: Everything a terminal acts on, one of each kind. No ';' outside the escapes' own, so the
#: scripted model echoes it as one statement... except OSC's own ';', which it splits at.
HOSTILE = "say \x1b]0;title\x07 \x1b]52;c;aGk=\x07 \x1b[2J \x9b2J bell\x07 back\x08 del\x7f end"
#: What a terminal acts on: C0 but newline (and tab, not used here), DEL, C1, ESC among them.
RAW = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def assert_shown(data: str, *glyphs: str) -> None:
    """`data`, as the bytes a terminal gets, holds no control character and shows `glyphs`."""
    raw = data.encode("utf-8", "surrogateescape")
    assert RAW.search(raw) is None, raw
    for glyph in glyphs:
        assert glyph in data, (glyph, data)


def assert_json_safe(data: str) -> None:
    """JSON output: not one raw control character, not even DEL or a C1 one."""
    raw = data.encode("utf-8", "surrogateescape")
    assert RAW.search(raw.replace(b"\n", b"")) is None, raw


EVERY_GLYPH = ("^[]0", "^G", "^[]52", "^[[2J", "<9b>2J", "back^H", "del^?")


def test_visible_shows_every_control_as_agenttui_draws_it() -> None:
    from prompt_toolkit.layout.screen import Char

    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]:
        char = chr(code)
        if char in "\n\t\r":
            continue
        assert visible(char) == Char.display_mappings[char], hex(code)
    assert visible("a\tb\nc") == "a\tb\nc"
    # A line end written the Windows way is a line end; a carriage return alone would let
    # text overwrite the start of its line.
    assert visible("one\r\ntwo\rX") == "one\ntwo^MX"
    # A byte that was not UTF-8 (kept by surrogateescape) would be written as that byte.
    assert visible("\udc9b2J") == "<9b>2J"
    text = HOSTILE + "\r\n\udc9b\ud800"
    assert json.loads(dumps(text)) == text
    assert_json_safe(dumps(text))


def test_visible_finds_one_control_in_a_long_text_ascii_or_not() -> None:
    # A listing of 10,000 lines is one text: ASCII text is checked byte-wise, the rest by
    # the regular expression; either way one control anywhere in it is shown.
    lines = [
        f"cli-{n:08x}  interrupted  pause  2026-12-05 01:00:00  read notes/{n}.md"
        for n in range(10_000)
    ]
    plain = "\n".join(lines) + "\n"
    assert visible(plain) is plain
    for control, glyph in [("\x1b", "^["), ("\x7f", "^?"), ("\x00", "^@"), ("\x9b", "<9b>")]:
        for at in (0, len(plain) // 2, len(plain)):
            hostile = plain[:at] + control + plain[at:]
            assert visible(hostile) == plain[:at] + glyph + plain[at:], (control, at)
            wide = "é" + hostile  # not ASCII: the other path
            assert visible(wide) == "é" + plain[:at] + glyph + plain[at:], (control, at)
    assert visible("é\tü\n") == "é\tü\n"


def test_run_shows_model_tool_and_question_text(state: Path, tmp_path: Path) -> None:
    done = run(["run", "--session", "cli-t1", HOSTILE], state, tmp_path)
    assert done.returncode == 0, done.stderr
    assert_shown(done.stdout, "say ^[]0\ntitle^G ^[]52", "^[[2J <9b>2J bell^G back^H del^? end")
    assert_shown(done.stderr)
    # A question's prompt and a confirmation's (the path is the model's text).
    asked = run(
        ["run", "--session", "cli-t2", "write e\x1b[2J\x9b.txt hi; ask Who\x07 \x1b]0 x\x07?"],
        state,
        tmp_path,
        stdin="y\nAda\n",
    )
    assert asked.returncode == 0, asked.stderr
    assert_shown(asked.stderr, "e^[[2J<9b>.txt", "? Who^G ^[]0 x^G?")
    assert_shown(asked.stdout, "You answered: Ada")
    assert (tmp_path / "e\x1b[2J\x9b.txt").read_text() == "hi"


def test_run_json_escapes_every_control_and_keeps_the_text(state: Path, tmp_path: Path) -> None:
    done = run(["run", "--json", "--session", "cli-j1", HOSTILE], state, tmp_path)
    assert done.returncode == 0, done.stderr
    assert_json_safe(done.stdout)
    assert "\\u009b2J" in done.stdout and "\\u007f" in done.stdout
    events = [json.loads(line) for line in done.stdout.splitlines()]
    text = "".join(e["text"] for e in events if e["type"] == "text")
    # The scripted model echoes the statements, one a line: the text comes back exact.
    assert text.replace("\n", ";") == HOSTILE


def test_sessions_list_and_show_show_stored_text(state: Path, tmp_path: Path) -> None:
    assert run(["run", "--session", "cli-s1", HOSTILE], state, tmp_path).returncode == 0
    listed = run(["sessions", "list"], state, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert_shown(listed.stdout, "cli-s1", visible(HOSTILE)[:57])
    shown = run(["sessions", "show", "cli-s1"], state, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert_shown(shown.stdout, f"session cli-s1: {visible(HOSTILE)}\n", f"\n> {visible(HOSTILE)}\n")
    as_json = run(["sessions", "show", "--json", "cli-s1"], state, tmp_path)
    assert_json_safe(as_json.stdout)
    data = json.loads(as_json.stdout)
    assert data["messages"][0]["content"] == HOSTILE
    listed_json = run(["sessions", "list", "--json"], state, tmp_path)
    assert_json_safe(listed_json.stdout)
    assert json.loads(listed_json.stdout)["title"] == HOSTILE


def test_pending_list_and_show_show_a_saved_question(state: Path, tmp_path: Path) -> None:
    question = "Who\x07 \x1b]0 x\x07 \x9b2J\x7f?"
    parked = run(["run", "--session", "chat-p1", f"ask {question}"], state, tmp_path)
    assert parked.returncode == 3, parked.stderr
    assert_shown(parked.stderr, "Who^G ^[]0 x^G <9b>2J^??")
    listed = run(["pending", "list"], state, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert_shown(listed.stdout, "chat-p1", "Who^G ^[]0 x^G <9b>2J^??")
    shown = run(["pending", "show", "chat-p1"], state, tmp_path)
    assert shown.returncode == 0, shown.stderr
    # The task's line, its saved conversation and what a resume will do, as text.
    assert_shown(shown.stdout, "asks: Who^G ^[]0 x^G <9b>2J^??", 'asked again: "Who^G ^[]0 x^G')
    shown_json = run(["pending", "show", "--json", "chat-p1"], state, tmp_path)
    assert shown_json.returncode == 0, shown_json.stderr
    assert_json_safe(shown_json.stdout)
    detail = json.loads(shown_json.stdout)
    assert detail["question"] == question
    assert detail["preview"]["questions"] == [question]
    listed_json = run(["pending", "list", "--json"], state, tmp_path)
    assert_json_safe(listed_json.stdout)
    assert json.loads(listed_json.stdout)["question"] == question


def test_lab_table_shows_the_replayed_conversation(tmp_path: Path) -> None:
    call_id = "c\x1b]0;t\x07\x9b"
    replay = tmp_path / "r.json"
    turns = [
        {"tool_calls": [{"name": "read_file", "id": call_id, "arguments": {"path": "x"}}]},
        {"text": "done \x1b]52;c;aGk=\x07"},
    ]
    replay.write_text(json.dumps({"turns": turns}))
    done = run(["lab", "--cause", "pause", "--replay", str(replay), "x"], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert_shown(done.stdout + done.stderr, "ToolCallEvent read_file c^[]0;t^G<9b>  ")
    # Columns are measured as shown: every row of the table is as wide as its rule.
    table = done.stdout.split("\n\n")[0].splitlines()
    assert len({len(line.rstrip()) for line in table[2:] if "c^[" in line}) == 1
    rule = table[1]
    assert all(len(line) == len(rule) for line in table if "c^[" in line)


def test_config_show_shows_a_value_from_the_file(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[openai]\nbase_url = "http://x/\\u001b]0;t\\u0007\\u009b2J"\n')
    env = env_for(tmp_path / "state")
    env["AGENTRT_CONFIG"] = str(config)
    done = subprocess.run(
        [*AGENTRT, "config", "show"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert_shown(done.stdout, "http://x/^[]0;t^G<9b>2J")
    as_json = subprocess.run(
        [*AGENTRT, "config", "show", "--json"], capture_output=True, text=True, env=env, timeout=60
    )
    assert_json_safe(as_json.stdout)
    assert json.loads(as_json.stdout)["openai.base_url"]["value"] == "http://x/\x1b]0;t\x07\x9b2J"


def test_keys_list_shows_a_hostile_file_name(tmp_path: Path) -> None:
    keys = tmp_path / "state" / "keys"
    keys.mkdir(parents=True)
    name = "K\x1b]0;t\x07\x9b"
    (keys / name).write_text("v")
    (keys / "OPENAI_API_KEY").write_text("v")
    done = run(["keys", "list"], tmp_path / "state", tmp_path)
    assert done.returncode == 0, done.stderr
    # A file whose name cannot be a key's is not listed at all; the list is shown as is.
    assert done.stdout == "OPENAI_API_KEY\n"
    as_json = run(["keys", "list", "--json"], tmp_path / "state", tmp_path)
    assert_json_safe(as_json.stdout)
    assert "OPENAI_API_KEY" in json.loads(as_json.stdout)["keys"]


def test_fleet_status_shows_a_member_row_as_stored(postgres_url: str, tmp_path: Path) -> None:
    import psycopg

    from agentrt.store.postgres import PgStore

    async def create() -> None:
        store = await PgStore.open(postgres_url, lease=60)
        await store.aclose()

    trio.run(create)
    host = "h\x1b]0;t\x07\x9b2J"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO daemons (id, host, pid, started_at, beat_at, lease_until, http) "
            "VALUES (%s, %s, 1, 0, 0, 0, %s)",
            ("x:m1", host, "http://\x1b[2J"),
        )
    done = run(["fleet", "status", "--store", postgres_url], tmp_path / "state", tmp_path)
    assert done.returncode == 0, done.stderr
    assert_shown(done.stdout, "h^[]0;t^G<9b>2J", "http://^[[2J")
    as_json = run(
        ["fleet", "status", "--json", "--store", postgres_url], tmp_path / "state", tmp_path
    )
    assert_json_safe(as_json.stdout)
    [member] = json.loads(as_json.stdout)["members"]
    assert member["host"] == host


async def test_a_message_posted_over_http_is_shown_by_sessions_list(tmp_path: Path) -> None:
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    argv = [sys.executable, "-m", "agentrt.daemon", "--socket", str(tmp_path / "d.sock")]
    argv += ["--state-dir", str(state), "--workdir", str(work), "--http", "127.0.0.1:0"]
    env = env_for(state)
    process = await trio.lowlevel.open_process(argv, stderr=subprocess.PIPE, env=env)
    try:
        assert process.stderr is not None
        base = await read_match(
            process.stderr, r"web chat on (http://127\.0\.0\.1:\d+)/", bytearray()
        )
        token = load_or_create_token(state)
        message = "sleep 60; " + HOSTILE
        with trio.fail_after(30):
            async with httpx.AsyncClient(
                base_url=base, headers={"Authorization": f"Bearer {token}"}
            ) as client:
                started = await client.post("/v1/session/h1/run", json={"text": message})
                assert started.status_code == 202, started.text
            listed = await trio.run_process(
                [*AGENTRT, "sessions", "list"], capture_stdout=True, env=env, cwd=work
            )
            assert_shown(listed.stdout.decode(), "chat-h1", visible(message)[:57])
            as_json = await trio.run_process(
                [*AGENTRT, "sessions", "list", "--json"], capture_stdout=True, env=env, cwd=work
            )
            out = as_json.stdout.decode()
            assert_json_safe(out)
            assert json.loads(out)["title"] == message
    finally:
        process.kill()
        await process.wait()


def test_the_checks_see_a_raw_control() -> None:
    # The assertions themselves: raw output would fail them.
    with pytest.raises(AssertionError):
        assert_shown(HOSTILE)
    with pytest.raises(AssertionError):
        assert_json_safe(json.dumps(HOSTILE, ensure_ascii=False))

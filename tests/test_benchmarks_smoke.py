"""Each benchmark runs at a tiny size, so the suite proves they still work.

These tests check the shape of what a benchmark reports and the checks it
makes besides timing (no entry left behind, no committed call run twice),
never the timings themselves.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from pathlib import Path

import pytest
import trio

try:
    import benchmarks  # noqa: F401
except ModuleNotFoundError:  # pytest run from elsewhere than the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_commands
from benchmarks import bench_conversations
from benchmarks import bench_core
from benchmarks import bench_processes
from benchmarks import bench_scale
from benchmarks import bench_tui
from benchmarks.__main__ import ORDER
from benchmarks.__main__ import _run_optional
from benchmarks.__main__ import ordered
from benchmarks._harness import Result
from benchmarks._processes import ensure_store
from benchmarks._processes import screen_text
from benchmarks.peers import __main__ as peers


def _assert_measured(result: Result, name: str, target: float | None = None) -> None:
    assert result.name == name
    assert result.failure is None
    assert result.subject > 0
    assert result.baseline > 0
    assert result.ratio == pytest.approx(result.subject / result.baseline)
    assert result.problems == ()
    if target is not None:
        assert result.target_kind == "ratio"
        assert result.target == target


async def test_ask_answer_benchmark_reports_a_ratio_and_leaves_no_entry() -> None:
    with trio.fail_after(20):
        result = await bench_core.bench_ask_answer(rounds=2, batch=3)
    _assert_measured(result, "ask_answer")
    assert result.target_kind == "ratio"
    assert result.target == 2.0


async def test_cancel_benchmark_pauses_runs_and_keeps_their_tasks(tmp_path: Path) -> None:
    with trio.fail_after(20):
        result = await bench_core.bench_cancel_final(tmp_path, rounds=2)
    _assert_measured(result, "cancel_final")
    assert result.target == 3.0


async def test_pause_resume_benchmark_reruns_no_committed_call(tmp_path: Path) -> None:
    with trio.fail_after(20):
        result = await bench_core.bench_pause_resume(tmp_path, rounds=2)
    _assert_measured(result, "pause_resume", 2.0)
    assert "re-executed committed tool calls: 0 over 4 resumes" in result.notes
    _assert_parts(result.notes)


def _assert_parts(notes: tuple[str, ...]) -> None:
    """A cycle's three parts are in the notes, each a time above zero."""
    (parts,) = [n for n in notes if n.startswith("a cycle's parts (medians): ")]
    times = re.findall(r" (\d+(?:\.\d+)?) (us|ms|s)\b", parts)
    assert len(times) == 3, parts
    assert all(float(value) > 0 for value, _ in times), parts


async def test_pg_pause_resume_benchmark_reruns_no_committed_call_and_counts_round_trips(
    tmp_path: Path, postgres_base: str
) -> None:
    with trio.fail_after(30):
        result = await bench_core.bench_pg_pause_resume(tmp_path, rounds=2)
    _assert_measured(result, "pg_pause_resume", 2.0)
    assert "re-executed committed tool calls: 0 over 6 resumes" in result.notes
    _assert_parts(result.notes)
    counted = next(n for n in result.notes if n.startswith("the store's round trips per cycle"))
    assert float(counted.split(": ")[1].split()[0]) > 0


async def test_claim_benchmark_keeps_its_populations_constant() -> None:
    with trio.fail_after(20):
        result = await bench_core.bench_claim_scaling(rounds=2, batch=5, large=300, small=30)
    _assert_measured(result, "claim_300")
    assert result.target == 2.0


async def test_durable_commit_benchmark_compares_full_with_normal(tmp_path: Path) -> None:
    with trio.fail_after(20):
        result = await bench_core.bench_durable_commit(tmp_path, rounds=2, batch=2)
    _assert_measured(result, "durable_commit")
    assert result.target_kind == "absolute"
    assert result.target == 2e-3


def _result(
    subject: float, baseline: float, kind: str = "ratio", target: float = 2.0
) -> bench_core.Result:
    return bench_core.Result("demo", subject, baseline, kind, target, 1)


def test_a_ratio_target_passes_up_to_its_bound_and_misses_beyond() -> None:
    assert _result(2.0, 1.0).passed
    assert not _result(2.1, 1.0).passed


def test_an_absolute_target_ignores_the_ratio() -> None:
    assert _result(0.9e-3, 1e-6, "absolute", 1e-3).passed
    assert not _result(1.1e-3, 1e-2, "absolute", 1e-3).passed


def test_a_problem_makes_a_fast_result_miss() -> None:
    result = bench_core.Result("demo", 1.0, 1.0, "ratio", 2.0, 1, problems=("ran twice",))
    assert not result.passed


def test_table_prints_each_figure_and_verdict() -> None:
    table = bench_core.format_table(
        [
            bench_core.Result("fast", 1.5e-6, 1e-6, "ratio", 2.0, 1),
            bench_core.Result("slow", 2e-3, 1e-4, "absolute", 1e-3, 1, problems=("oops",)),
        ]
    )
    lines = table.splitlines()
    assert lines[0].split() == [
        "benchmark",
        "subject",
        "median",
        "baseline",
        "median",
        "ratio",
        "target",
        "result",
    ]
    assert lines[2].split() == ["fast", "1.50", "us", "1.00", "us", "1.50x", "<=", "2x", "PASS"]
    assert lines[3].split() == [
        "slow",
        "2.000",
        "ms",
        "100.00",
        "us",
        "20.00x",
        "<=",
        "1.000",
        "ms",
        "MISS",
    ]
    assert "slow: PROBLEM: oops" in lines


def test_a_missing_optional_benchmark_is_skipped() -> None:
    assert _run_optional("benchmarks.no_such_benchmark")


def test_a_crashing_optional_benchmark_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken_bench_for_test.py").write_text(
        "def main():\n    raise RuntimeError('boom')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not _run_optional("broken_bench_for_test")
    out = capsys.readouterr()
    assert "broken_bench_for_test failed to run" in out.out
    assert "RuntimeError: boom" in out.err


def test_a_failed_subject_prints_its_reason_and_misses() -> None:
    result = Result.failed("big_list", "frame longer than 1048576 bytes", 2e-3, 12.0, 3)
    assert not result.passed
    row = bench_core.format_table([result]).splitlines()[2]
    assert "fails: frame longer than 1048576 bytes" in row
    assert row.split()[-1] == "MISS"


def test_rows_follow_the_order_of_the_figures() -> None:
    rows = [_result(1.0, 1.0)] + [bench_core.Result(n, 1.0, 1.0, "ratio", 2, 1) for n in ORDER]
    assert [r.name for r in ordered(rows)] == [*ORDER, "demo"]


def test_screen_text_drops_escape_sequences() -> None:
    drawn = b"\x1b[?1049h\x1b[1;1H\x1b[0;7m idle  |  Esc stop\x1b[0m\x1b[6n"
    assert screen_text(drawn) == " idle  |  Esc stop"


# -- growth with the work ------------------------------------------------------------


async def test_commit_benchmark_saves_both_sizes_and_cleans_up(tmp_path: Path) -> None:
    with trio.fail_after(30):
        result = await bench_scale.bench_commit_size(tmp_path, rounds=2, large=20, small=2)
    _assert_measured(result, "commit_20", 1.5)
    assert any(note.startswith("AgentRun.commit itself") for note in result.notes)


async def test_history_benchmark_runs_in_a_session_with_history(tmp_path: Path) -> None:
    with trio.fail_after(30):
        result = await bench_scale.bench_history_size(tmp_path, rounds=2, history=30)
    _assert_measured(result, "history_30", 1.5)


async def test_request_building_benchmark_compares_a_compacted_session_with_a_short_one(
    tmp_path: Path,
) -> None:
    with trio.fail_after(30):
        result = await bench_conversations.bench_request_building(
            tmp_path, rounds=2, batch=2, history=200
        )
    _assert_measured(result, "history_200", 1.5)
    assert "(a prompt of 13 messages)" in result.notes[0]


async def test_otel_benchmark_traces_every_run_it_says_it_traced(tmp_path: Path) -> None:
    with trio.fail_after(30):
        result = await bench_conversations.bench_otel_overhead(tmp_path, rounds=2)
    _assert_measured(result, "otel_overhead", 1.2)


async def test_registry_benchmarks_leave_their_registries_as_they_found_them() -> None:
    with trio.fail_after(30):
        post = await bench_scale.bench_post_fanout(rounds=2, batch=3, large=10, small=1)
        listen = await bench_scale.bench_listen_scaling(rounds=2, batch=2, large=60, small=6)
        has = await bench_scale.bench_has_listener(rounds=2, batch=4, large=10, small=1)
    _assert_measured(post, "post_10", 2.0)
    _assert_measured(listen, "listen_60", 2.0)
    _assert_measured(has, "has_listener_10", 2.0)


# -- other processes -----------------------------------------------------------------


async def test_two_process_benchmarks_run_against_real_daemons() -> None:
    # A short folder: Unix socket paths must stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp, trio.fail_after(120):
        results = await bench_processes.run_all(Path(tmp), idle=5, tasks=(30, 3), rounds=2)
    names = [r.name for r in results]
    assert names == ["cancel_2p", "ask_2p", "answer_idle_5", "pending_list_30"]
    targets = {"cancel_2p": 2.0, "ask_2p": 1.5, "answer_idle_5": 1.3, "pending_list_30": 12.0}
    for result in results:
        _assert_measured(result, result.name, targets[result.name])


async def test_commands_benchmarks_time_real_commands(tmp_path: Path) -> None:
    store = await ensure_store(tmp_path / "store", 5)
    with trio.fail_after(180):
        results = await trio.to_thread.run_sync(
            lambda: bench_commands.run_all(
                tmp_path, store, large=5, rounds=1, largest=20, history=50
            )
        )
    targets = {
        "cli_pending_5": 1.1,
        "pending_list_20": 1.5,
        "pending_list_20_5": 11.0,
        "continue_50": 1.2,
        "continue_50_daemon": 1.2,
        "run_hello": 1.3,
        "client_import": 1.3,
        "tui_first_screen": 1.3,
    }
    assert [r.name for r in results] == list(targets)
    for result in results:
        _assert_measured(result, result.name, targets[result.name])
    assert "(connected)" in results[-1].notes[0]


def test_tui_benchmarks_stream_a_reply_into_a_real_window(tmp_path: Path) -> None:
    # A short folder: Unix socket paths must stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp:
        stream, idle, reply, piece, echo = bench_tui.run_all(
            Path(tmp), size=400, idle=0.5, lines=(20, 60), keys=3
        )
    # The reply's last words showed in the window (else a problem is reported).
    _assert_measured(stream, "tui_stream_20k", 2.0)
    assert idle.name == "tui_idle_after_20k"
    assert (idle.failure, idle.problems, idle.target_kind, idle.target) == (
        None,
        (),
        "absolute",
        0.6,
    )
    assert idle.subject >= 0 and idle.baseline >= 0
    # The long reply's end showed in both the window and agentrt run's pane.
    assert (reply.name, reply.failure, reply.problems) == ("tui_reply_60", None, ())
    assert reply.subject > 0 and reply.baseline > 0
    assert (piece.name, piece.failure, piece.problems) == ("tui_piece_60", None, ())
    assert (echo.name, echo.failure, echo.samples) == ("tui_echo_60", None, 3)
    assert echo.subject > 0 and echo.baseline > 0


# -- the peers comparison ------------------------------------------------------------


async def test_peers_rotation_gives_every_system_each_place_in_turn() -> None:
    order: list[str] = []

    def system(key: str) -> peers.Batch:
        async def batch(size: int) -> list[float]:
            await trio.lowlevel.checkpoint()
            order.extend([key] * size)
            return [float(len(order))] * size

        return batch

    times = await peers.rotate({k: system(k) for k in "abc"}, rounds=3, size=2)
    assert {k: len(v) for k, v in times.items()} == {"a": 6, "b": 6, "c": 6}
    rounds = ["".join(order[n : n + 6 : 2]) for n in range(6, len(order), 6)]
    assert rounds == ["abc", "acb", "cab"]


def test_peers_table_says_how_each_system_compares_with_agentrt() -> None:
    table = peers.format_systems(
        [
            peers.System("agentrt", "agentrt cycle", 1e-3, 10),
            peers.System("sqlite", "bare SQLite", 1e-4, 10),
            peers.System("langgraph", "LangGraph cycle", 8e-3, 10),
        ],
        "agentrt",
    ).splitlines()
    assert table[2].endswith("1.00x")
    assert table[3].endswith("10.00x faster")
    assert table[4].endswith("8.00x slower")


def test_peers_table_compares_the_postgresql_rows_with_agentrt_on_postgresql() -> None:
    table = peers.format_systems(
        [
            peers.System("agentrt", "agentrt cycle", 1e-3, 10),
            peers.System("agentrt_pg", "agentrt on PostgreSQL", 2e-3, 10),
            peers.System("langgraph_pg", "PostgresSaver", 12e-3, 10),
        ],
        "agentrt",
        {"langgraph_pg": "agentrt_pg"},
    ).splitlines()
    assert table[3].endswith("2.00x slower")
    assert table[4].endswith("6.00x slower")


def test_peers_comparison_says_how_to_install_the_peers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert peers.main([]) == 2
    assert "make bench-peers" in capsys.readouterr().err


async def test_mcp_call_benchmark_calls_through_agentrt_and_bare(tmp_path: Path) -> None:
    from benchmarks import bench_mcp

    with trio.fail_after(60):
        result = await bench_mcp.bench_mcp_call(tmp_path, rounds=2, batch=2)
    _assert_measured(result, "mcp_call", 1.3)
    assert "mcp_call" in ORDER

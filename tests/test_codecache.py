"""The compiled methods of attrs classes kept between starts (`agentrt.apps.codecache`)."""

from __future__ import annotations

import marshal
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attr._make
import attrs
import pytest

from agentrt.apps import codecache
from agentrt.apps.codecache import MethodCache

from .cli_process import run_python
from .cli_process import running_daemon

STAMP = codecache.attrs_stamp(attr._make)
#: The file's name for this Python and this attrs (that of the processes the tests start).
KEPT_NAME = codecache.file_name(STAMP)
HEADER_START = b"agentrt attrs methods\n"


@pytest.fixture(autouse=True)
def attrs_own(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Bytecode written, as by default; attrs's own compiling function checked to be back in
    place after each test."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    own = attr._make._compile_and_eval
    yield
    assert attr._make._compile_and_eval is own


def _point() -> type:
    """An attrs class, made from the same source each time."""

    @attrs.define
    class Point:
        x: int
        y: int = 0

    return Point


def _made_with(cache: MethodCache) -> type:
    """`_point()` made while `cache` stands in attrs's place."""
    assert cache.install(attr._make)
    try:
        return _point()
    finally:
        cache.close()


def _read(path: Path) -> tuple[bytes, dict[str, bytes]]:
    """A cache file's header and table."""
    data = path.read_bytes()
    header = codecache.header(STAMP)
    assert data.startswith(header)
    table = marshal.loads(data[len(header) :])
    assert isinstance(table, dict)
    return header, table


def _read_bytes(data: bytes) -> dict[str, bytes]:
    """The table of a cache file's content `data`."""
    table = marshal.loads(data[len(codecache.header(STAMP)) :])
    assert isinstance(table, dict)
    return table


def _dumped(script: str, filename: str) -> bytes:
    """`script` compiled under `filename`, as the file keeps code."""
    return marshal.dumps(compile(script, filename, "exec"))


def _works(point: type) -> None:
    assert point(1, 2) == point(1, 2) and point(1, 2) != point(1, 3)
    assert repr(point(3)) == "Point(x=3, y=0)"
    assert point(y=5, x=4).y == 5


def test_a_start_takes_the_methods_from_the_file_the_last_one_wrote(tmp_path: Path) -> None:
    path = tmp_path / "methods.bin"
    first = MethodCache(path, STAMP)
    point = _made_with(first)
    assert (first.hits, first.misses) == (0, 1)
    _works(point)
    header, table = _read(path)
    assert header.startswith(HEADER_START)
    (key,) = table
    filename, script = key.split("\0", 1)
    assert filename == point.__init__.__code__.co_filename  # type: ignore[misc]
    assert "def __init__(self, x, y=attr_dict['y'].default):" in script

    # Proven to come from the file: the code kept for that source is compiled under
    # another file name here, and the next class made from the source runs it.
    path.write_bytes(header + marshal.dumps({key: _dumped(script, "<kept>")}))
    second = MethodCache(path, STAMP)
    again = _made_with(second)
    assert (second.hits, second.misses) == (1, 0)
    assert again.__init__.__code__.co_filename == "<kept>"  # type: ignore[misc]
    _works(again)
    assert _read(path)[1].keys() == {key}  # nothing new: the file was not written again


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="cut short"),
        pytest.param(lambda data: data[:40] + b"\xff" * 64, id="garbage"),
        pytest.param(
            lambda data: codecache.header("another attrs") + data[len(codecache.header(STAMP)) :],
            id="other attrs",
        ),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(
            lambda data: codecache.header(STAMP) + marshal.dumps({"key": "not code", 3: b"x"}),
            id="wrong types",
        ),
        pytest.param(
            lambda data: codecache.header(STAMP) + marshal.dumps(["a list"]), id="not a table"
        ),
        pytest.param(
            lambda data: (
                codecache.header(STAMP)
                + marshal.dumps({key: b"\xffnot code" for key in _read_bytes(data)})
            ),
            id="an entry not code",
        ),
        pytest.param(
            lambda data: (
                codecache.header(STAMP)
                + marshal.dumps({key: marshal.dumps("a str") for key in _read_bytes(data)})
            ),
            id="an entry of another type",
        ),
    ],
)
def test_a_damaged_or_foreign_file_is_ignored_and_replaced(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "methods.bin"
    _made_with(MethodCache(path, STAMP))
    good = path.read_bytes()
    assert callable(damage)
    path.write_bytes(damage(good))
    cache = MethodCache(path, STAMP)
    point = _made_with(cache)
    assert (cache.hits, cache.misses) == (0, 1)
    _works(point)
    assert path.read_bytes() == good


def _frozen_made_with(cache: MethodCache, scripts: list[str]) -> type:
    """A frozen (so hashable) class made while `cache` stands in attrs's place; the
    scripts attrs wrote for it are added to `scripts`."""
    compile_and_eval = cache.compile_and_eval

    def telling(script: str, *args: Any, **kwargs: Any) -> None:
        scripts.append(script)
        compile_and_eval(script, *args, **kwargs)

    cache.compile_and_eval = telling  # type: ignore[method-assign]
    assert cache.install(attr._make)
    try:

        @attrs.frozen
        class Frozen:
            x: int

    finally:
        cache.close()
    return Frozen


def test_a_generated_hash_is_kept_without_the_number_each_process_draws(tmp_path: Path) -> None:
    path = tmp_path / "methods.bin"
    first, scripts = MethodCache(path, STAMP), list[str]()
    frozen = _frozen_made_with(first, scripts)
    (script,) = scripts
    # attrs starts the hashed tuple with the hash of a string: another in each process.
    seed = int(script.split("return hash((")[1].split(",")[0])
    assert (first.hits, first.misses, first.unkept) == (0, 1, 0)
    assert hash(frozen(1)) == hash((seed, 1)) and frozen(1) == frozen(1) != frozen(2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        frozen(1).x = 2
    header, table = _read(path)
    (key,) = table
    assert str(seed) not in key and "return hash((" in key

    # What the file keeps (compiled here under another name, to be told apart) is what the
    # next start runs, with its own number in the stand-in's place.
    kept_script = key.split("\0", 1)[1]
    path.write_bytes(header + marshal.dumps({key: _dumped(kept_script, "<kept>")}))
    second = MethodCache(path, STAMP)
    again = _frozen_made_with(second, [])
    assert (second.hits, second.misses, second.unkept) == (1, 0, 0)
    assert again.__hash__.__code__.co_filename == "<kept>"
    assert hash(again(1)) == hash((seed, 1)) and hash(again(1)) != hash(again(2))


def test_a_hash_of_another_shape_is_compiled_and_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "methods.bin"
    cache = MethodCache(path, STAMP)
    made: dict[str, Any] = {}
    cache.compile_and_eval("def __hash__(self):\n    return 7\n", made, None, "<odd>")
    cache.close()
    assert made["__hash__"](None) == 7
    assert (cache.hits, cache.misses, cache.unkept) == (0, 0, 1)
    assert not path.exists()


def test_an_older_source_of_a_class_is_dropped_and_other_classes_kept(tmp_path: Path) -> None:
    path = tmp_path / "methods.bin"
    _made_with(MethodCache(path, STAMP))
    header, table = _read(path)
    (key,) = table
    filename = key.split("\0", 1)[0]
    older = f"{filename}\0def __init__(self, x):\n    self.x = x\n"
    other = "<attrs generated methods another.Class>\0pass"
    path.write_bytes(
        header + marshal.dumps({older: _dumped("pass", filename), other: _dumped("pass", "o")})
    )
    cache = MethodCache(path, STAMP)
    _works(_made_with(cache))
    assert (cache.hits, cache.misses) == (0, 1)
    assert _read(path)[1].keys() == {key, other}


def test_another_attrs_or_python_reads_nothing_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "methods.bin"
    _made_with(MethodCache(path, STAMP))
    assert MethodCache(path, STAMP).known
    assert MethodCache(path, STAMP + "-other").known == {}


def test_nothing_is_written_where_python_would_write_no_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as PYTHONDONTWRITEBYTECODE does
    path = tmp_path / "methods.bin"
    cache = MethodCache(path, STAMP)
    _works(_made_with(cache))
    assert cache.misses == 1
    assert not path.exists()


def test_a_folder_that_cannot_be_written_costs_the_cache_alone(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = blocker / "__pycache__" / "methods.bin"
    _works(_made_with(MethodCache(path, STAMP)))
    assert not path.exists()
    assert os.listdir(tmp_path) == ["a-file"]  # no temporary file left either


def test_past_its_bound_the_file_keeps_what_this_start_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "methods.bin"
    _made_with(MethodCache(path, STAMP))
    header, table = _read(path)
    stale = {f"<old {n}>\0pass": _dumped("pass", f"<old {n}>") for n in range(4)}
    path.write_bytes(header + marshal.dumps(stale))
    monkeypatch.setattr(codecache, "MAX_ENTRIES", 5)
    _made_with(MethodCache(path, STAMP))  # 4 + 1 fit: all are kept
    assert _read(path)[1].keys() == stale.keys() | table.keys()

    monkeypatch.setattr(codecache, "MAX_ENTRIES", 4)
    path.write_bytes(header + marshal.dumps(stale))
    _made_with(MethodCache(path, STAMP))  # 4 + 1 do not: this start's entry alone
    assert _read(path)[1].keys() == table.keys()


def test_the_file_goes_where_python_puts_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    package = Path(codecache.__file__).resolve().parent.parent
    name = codecache.file_name(STAMP)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert codecache.default_path(STAMP) == str(package / "__pycache__" / name)
    monkeypatch.setattr(sys, "pycache_prefix", "/prefix")
    assert codecache.default_path(STAMP) == str(Path("/prefix", *package.parts[1:], name))
    # One file for each Python and each attrs (another virtualenv of the same checkout).
    assert name.startswith(f"attrs-methods.{sys.implementation.cache_tag}.")
    assert name.endswith(".bin") and len(name) == len(
        f"attrs-methods.{sys.implementation.cache_tag}.12345678.bin"
    )
    assert codecache.file_name(STAMP + "-another") != name


#: Runs `agentrt run hello` as the console script does and tells, as it exits, what the
#: start's cache found (``cache HITS MISSES UNKEPT OWN``: OWN whether attrs has its own
#: function back).
_TELLING = """\
import os, sys
import attr._make
from agentrt.apps import codecache, entry
exit_for_real = os._exit
def exiting(code):
    cache = codecache._cache
    own = attr._make._compile_and_eval.__module__ == "attr._make"
    print("cache", cache.hits, cache.misses, cache.unkept, own, file=sys.stderr, flush=True)
    exit_for_real(code)
os._exit = exiting
sys.argv = ["agentrt", "run", "hello", "--state-dir", sys.argv[1]]
entry.console_main()
"""


def _bytecode_env(prefix: Path) -> dict[str, str]:
    """This environment, writing bytecode under `prefix` (and no ``AGENTRT_`` variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    return env


def _python(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS...`` of this interpreter in `env` and `cwd`, its output captured."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        cwd=cwd,
    )


def _told(code: str, tmp_path: Path, env: dict[str, str]) -> list[str]:
    done = _python(env, tmp_path, "-c", code, str(tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout
    return next(line.split() for line in done.stderr.splitlines() if line.startswith("cache"))


def test_the_second_start_of_the_command_compiles_none_of_its_classes(tmp_path: Path) -> None:
    env = _bytecode_env(tmp_path / "prefix")
    _, hits, misses, unkept, own = _told(_TELLING, tmp_path, env)
    assert (int(hits), unkept, own) == (0, "0", "True")
    # The command's modules define well over a hundred attrs classes.
    assert int(misses) > 100, misses
    (kept,) = (tmp_path / "prefix").rglob(KEPT_NAME)
    assert kept.parent.name == "agentrt"
    made_by = {key.split("\0", 1)[0] for key in _read(kept)[1]}
    assert len(made_by) == int(misses)
    # Loaded once the command runs (when it opens its store), not with its own modules.
    assert "<attrs generated methods agentrt.store.writer.Writer>" in made_by
    written = kept.stat().st_mtime_ns

    again = _told(_TELLING, tmp_path, env)
    assert again == ["cache", misses, "0", unkept, "True"]
    assert kept.stat().st_mtime_ns == written  # nothing new: not written again


def test_an_application_importing_agentrt_keeps_attrs_as_it_is(tmp_path: Path) -> None:
    done = run_python(
        "import attr._make, agentrt.apps.cli, agentrt.apps.entry\n"
        "print(attr._make._compile_and_eval.__module__)",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["attr._make"]


def test_the_daemon_keeps_the_methods_of_its_own_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in _bytecode_env(tmp_path / "prefix").items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    with running_daemon(tmp_path / "state", tmp_path / "work") as daemon:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    (kept,) = (tmp_path / "prefix").rglob(KEPT_NAME)
    made_by = {key.split("\0", 1)[0] for key in _read(kept)[1]}
    # `_Http` is defined in the daemon's own module, loaded after the command's.
    assert "<attrs generated methods agentrt.apps.daemon._Http>" in made_by
    assert "<attrs generated methods agentrt.store.record.TaskRecord>" in made_by
    written = kept.stat().st_mtime_ns

    # The next daemon compiles nothing new, so the file is left as it is.
    with running_daemon(tmp_path / "state", tmp_path / "work") as daemon:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    assert kept.stat().st_mtime_ns == written


def test_written_ahead_the_file_serves_a_start_that_writes_no_bytecode(tmp_path: Path) -> None:
    env = _bytecode_env(tmp_path / "prefix")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    made = _python(env, tmp_path, "-m", "agentrt.apps.codecache")
    assert made.returncode == 0, made.stderr
    (kept,) = (tmp_path / "prefix").rglob(KEPT_NAME)
    assert made.stdout == f"{len(_read(kept)[1])} compiled methods kept in {kept}\n"
    made_by = {key.split("\0", 1)[0] for key in _read(kept)[1]}
    # The command's, its store's, the daemon's and agenttui's classes.
    for name in ("store.record.TaskRecord", "store.writer.Writer", "apps.daemon._Http"):
        assert f"<attrs generated methods agentrt.{name}>" in made_by
    assert any(name.startswith("<attrs generated methods agenttui.") for name in made_by)

    _, hits, misses, unkept, own = _told(_TELLING, tmp_path, env)
    assert (int(hits) > 100, misses, unkept, own) == (True, "0", "0", "True")


def test_written_ahead_where_it_cannot_be_says_so(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = _bytecode_env(blocker)
    made = _python(env, tmp_path, "-m", "agentrt.apps.codecache")
    assert made.returncode == 1
    assert made.stderr.startswith(f"could not write {blocker}/"), made.stderr

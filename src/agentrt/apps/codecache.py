"""Bytecode of the methods attrs writes for agentrt's classes, kept between starts.

attrs makes each class's ``__init__``, ``__eq__``, ``__hash__``... by writing
their Python source and compiling it as the class is defined. Loading the
`agentrt` command's modules defines some 130 such classes: about 47,000
characters of source, compiled anew by every start in 16 ms, a fifth of the
time those modules take to load (and more than every other stage of
``agentrt run hello`` but the model's own pause). The code that comes out
depends on the source alone, so it is kept, as Python keeps a module's
bytecode: in the ``__pycache__`` folder beside agentrt's modules (a file for
each Python and each attrs), under `sys.pycache_prefix` when one is set, never
written when `sys.dont_write_bytecode` is (``PYTHONDONTWRITEBYTECODE``).
``python -m agentrt.apps.codecache`` writes it ahead, as ``compileall`` does
bytecode.

A start reads the file once (about 1 ms for the command's 300 KB; each entry's
code is only unpacked when its class is built), and while its modules load,
each class attrs builds finds its code there by its source and the file name
attrs gives it; anything not found is compiled as attrs would, and the file is
written again, whole, by a rename: what it held for other programs (the
daemon, agenttui) stays, an older source of a class this start built goes. A
file that cannot be read, is of another Python or attrs, or is damaged is
ignored and replaced. Only agentrt's own programs use it, from `begin` to
`end`: the command until it is over (its store's modules load while it runs),
the daemon until its socket is served, agenttui until its first screen is
drawn (`agentrt.apps.entry`); an application that imports agentrt is left
alone.

This module imports the standard library alone (and attrs's own module when
installed): it runs before the rest of agentrt is loaded.
"""

from __future__ import annotations

import marshal
import os
import re
import sys
import types
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Final

#: How the file's name starts, in ``__pycache__``; `file_name` gives the rest.
FILE_PREFIX: Final = "attrs-methods."
#: At most this many compiled methods are kept: past it, a write keeps this start's alone.
MAX_ENTRIES: Final = 4096

_Compile = Callable[..., None]
#: How attrs's generated ``__hash__`` begins; and the number its source starts the hashed
#: tuple with: the hash of a string, which differs from one process to the next.
_HASH_DEF: Final = "def __hash__(self"
_HASH_SEED: Final = re.compile(r"\n\s*return hash\(\(\n\s*(-?\d+),\n")
#: What stands for that number in the kept code: no hash of a string is ever this large.
_STAND_IN: Final = 2**70 + 0x5EED


def _compile(script: str, filename: str) -> types.CodeType:
    """`script` compiled as attrs compiles it (this module has the same future flag)."""
    return compile(script, filename, "exec")


def _code_of(kept: bytes | None) -> types.CodeType | None:
    """The code object `kept` holds; None for none, or for bytes that are not one."""
    if kept is None:
        return None
    try:
        code = marshal.loads(kept)
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, types.CodeType) else None


def _with_constant(code: types.CodeType, old: int, new: int) -> types.CodeType:
    """`code` with each constant `old` in it (and in the functions it defines) made `new`."""
    consts = tuple(
        new
        if type(const) is int and const == old
        else _with_constant(const, old, new)
        if isinstance(const, types.CodeType)
        else const
        for const in code.co_consts
    )
    return code.replace(co_consts=consts)


def file_name(attrs_stamp: str) -> str:
    """The file's name for this Python (its tag, as a module's bytecode has) and this attrs.

    Two virtualenvs of one checkout (another attrs in each) keep a file each, instead of
    replacing each other's at every start.
    """
    import binascii

    stamp = binascii.crc32(attrs_stamp.encode())
    return f"{FILE_PREFIX}{sys.implementation.cache_tag}.{stamp:08x}.bin"


def default_path(attrs_stamp: str) -> str:
    """Where the file lives: agentrt's own ``__pycache__``, as Python would place bytecode."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    name = file_name(attrs_stamp)
    if sys.pycache_prefix:
        # As importlib does: the source folder's absolute path re-rooted under the prefix.
        return os.path.join(sys.pycache_prefix, package.lstrip(os.sep), name)
    return os.path.join(package, "__pycache__", name)


def header(attrs_stamp: str) -> bytes:
    """What the file starts with: whose bytecode it holds (this Python's, this attrs's)."""
    import importlib.util

    return b"agentrt attrs methods\n" + importlib.util.MAGIC_NUMBER + attrs_stamp.encode() + b"\n"


def attrs_stamp(module: Any) -> str:
    """Which attrs builds the classes: the path, time and size of `module`'s source.

    (``attr.__version__`` would load importlib.metadata, as long as the time saved.)
    """
    source = getattr(module, "__file__", None) or ""
    try:
        info = os.stat(source)
    except OSError:
        return source
    return f"{source}:{info.st_mtime_ns}:{info.st_size}"


def _key(script: str, filename: str) -> str:
    """The key of one compiled script: the file name it is compiled under, and its source.

    The whole text, not a digest of it: no two scripts can share a key, and no hash
    library is loaded for it.
    """
    return f"{filename}\0{script}"


class MethodCache:
    """The compiled methods of one file, looked up while attrs builds classes.

    `install` puts `compile_and_eval` in attrs's place; `close` puts attrs's
    own back and writes the file if anything was compiled that it lacked.
    """

    def __init__(self, path: str | os.PathLike[str], attrs_stamp: str) -> None:
        self.path = os.fspath(path)
        #: What the file starts with when it holds this Python's and this attrs's code.
        self.header = header(attrs_stamp)
        #: The file's entries, by key (`_key`): each a code object as `marshal` writes it,
        #: read only when its class is built (what the start does not build costs a copy).
        self.known: dict[str, bytes] = {}
        #: The entries this start used or made, by key.
        self.used: dict[str, bytes] = {}
        #: How many scripts were found in the file, how many had to be compiled, and how
        #: many were compiled and not kept (a ``__hash__`` of a shape not known here).
        self.hits = 0
        self.misses = 0
        self.unkept = 0
        #: Whether something was compiled since the file was last read or written.
        self._unsaved = False
        self._module: Any = None
        self._original: _Compile | None = None
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as file:
                data = file.read()
        except OSError:
            return
        if not data.startswith(self.header):
            return
        try:
            table = marshal.loads(data[len(self.header) :])
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(table, dict):
            self.known = {
                key: code
                for key, code in table.items()
                if isinstance(key, str) and isinstance(code, bytes)
            }

    def compile_and_eval(
        self,
        script: str,
        globs: dict[str, Any] | None,
        locs: Mapping[str, object] | None = None,
        filename: str = "",
    ) -> None:
        """attrs's ``_compile_and_eval``, with the compiled code taken from the file when there."""
        # A generated __hash__ starts from a number new in each process (the hash of a
        # string: ``PYTHONHASHSEED``). The script is kept with a stand-in for it, which the
        # code kept holds in its place until it is used.
        seed = None
        if _HASH_DEF in script:
            found = _HASH_SEED.search(script)
            if found is None:  # a shape of __hash__ this module does not know: not kept
                self.unkept += 1
                eval(_compile(script, filename), globs, locs)
                return
            seed = int(found.group(1))
            script = f"{script[: found.start(1)]}{_STAND_IN}{script[found.end(1) :]}"
        key = _key(script, filename)
        code = _code_of(self.known.get(key))
        if code is None:
            code = _compile(script, filename)
            self.misses += 1
            self._unsaved = True
            self.used[key] = marshal.dumps(code)
        else:
            self.hits += 1
            self.used[key] = self.known[key]
        if seed is not None:
            code = _with_constant(code, _STAND_IN, seed)
        eval(code, globs, locs)  # attrs's own generated source, run as attrs runs it

    def install(self, module: Any) -> bool:
        """Take the place of `module`'s ``_compile_and_eval``; False if it has none."""
        if self._module is not None:
            return True
        original = getattr(module, "_compile_and_eval", None)
        if not callable(original):
            return False
        self._module, self._original = module, original
        module._compile_and_eval = self.compile_and_eval
        return True

    def close(self) -> None:
        """Give attrs its own function back, and write the file if this start compiled anything."""
        if self._module is not None:
            self._module._compile_and_eval = self._original
            self._module = self._original = None
        if self._unsaved and not sys.dont_write_bytecode:
            self.write()

    def write(self) -> bool:
        """Write what the file held and what this start made, replacing the file by a rename.

        Nothing is said when the folder cannot be written (a read-only install): the
        next start compiles, as it would without the file. Whether it was written.
        """
        # Another program's classes stay (the daemon's, agenttui's); an older version of a
        # class this start built (another source under the same file name) goes.
        built = {key.partition("\0")[0] for key in self.used}
        table = {k: v for k, v in self.known.items() if k.partition("\0")[0] not in built}
        table.update(self.used)
        if len(table) > MAX_ENTRIES:
            table = dict(self.used)
        self.known, self._unsaved = table, False
        folder, name = os.path.split(self.path)
        temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
        try:
            os.makedirs(folder, exist_ok=True)
            with open(temporary, "wb") as out:
                out.write(self.header + marshal.dumps(table))
            os.replace(temporary, self.path)
        except OSError:
            import contextlib

            with contextlib.suppress(OSError):
                os.unlink(temporary)
            return False
        return True


#: This process's cache, once `begin` made it.
_cache: MethodCache | None = None


def begin(path: str | os.PathLike[str] | None = None) -> MethodCache | None:
    """Put this process's cache in attrs's place, reading its file (`path`) the first time.

    The default file is in agentrt's ``__pycache__``. None when this attrs builds its
    methods in a way the cache does not know (and then nothing is changed).
    """
    global _cache
    import attr._make

    if _cache is None:
        stamp = attrs_stamp(attr._make)
        _cache = MethodCache(default_path(stamp) if path is None else path, stamp)
    return _cache if _cache.install(attr._make) else None


def end() -> None:
    """Give attrs its own function back; write the file if the cache compiled anything new."""
    if _cache is not None:
        _cache.close()


#: The modules agentrt's programs load before their start is over: the command's (with
#: its SQLite store and a model's options), the daemon's and agenttui's window. One left
#: out is compiled by the first start that loads it, and kept by it where it may write.
PROGRAM_MODULES: Final = (
    "agentrt.apps.cli",
    "agentrt.store.sqlite",
    "agentrt.models.options",
    "agentrt.apps.daemon",
    "agenttui.__main__",
    "agenttui._bridge",
    "agenttui._app",
)


def main(argv: list[str] | None = None) -> int:
    """``python -m agentrt.apps.codecache``: the file written ahead, as ``compileall`` does.

    Loads the modules of agentrt's programs with the cache in attrs's place and writes
    the file, even under ``PYTHONDONTWRITEBYTECODE`` (it was asked for), so that no
    start has to. For an install whose first start should be as quick as the next
    (``make bench`` runs it after ``compileall``).
    """
    import argparse
    import importlib

    parser = argparse.ArgumentParser(
        prog="python -m agentrt.apps.codecache",
        description="Compile the methods attrs writes for the classes of agentrt's programs "
        "(the command, the daemon, agenttui) and keep them beside agentrt's bytecode, so "
        "that no start compiles them. Honours PYTHONPYCACHEPREFIX.",
    )
    parser.parse_args(argv)
    cache = begin()
    if cache is None:
        print("this attrs builds its classes in a way agentrt does not know: nothing kept")
        return 1
    try:
        for name in PROGRAM_MODULES:
            importlib.import_module(name)
    finally:
        end()
    if not cache.write():
        print(f"could not write {cache.path}: the next starts compile them", file=sys.stderr)
        return 1
    print(f"{len(cache.known)} compiled methods kept in {cache.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""No import goes up a layer: the table in docs/architecture.md, checked against every module."""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"

#: The layers, bottom first; a module may import from its own layer and those below.
ORDER = ("vocabulary", "protocol", "runtime", "front-end", "applications")


@attrs.frozen
class Place:
    """Where the table puts a module: its layer and, for a front-end, which one."""

    layer: str
    row: str

    @property
    def rank(self) -> int:
        return ORDER.index(self.layer)


def read_table() -> list[tuple[str, Place]]:
    """(pattern, place) for every module name in the layer table of the architecture page."""
    text = DOC.read_text("utf-8")
    start = text.index("<!-- layers: read by tests/test_layers.py -->")
    rows: list[tuple[str, Place]] = []
    for line in text[start:].splitlines()[3:]:
        if not line.startswith("|"):
            break
        row, modules = (cell.strip() for cell in line.strip("|").split("|"))
        layer = row.partition(":")[0].strip()
        assert layer in ORDER, f"unknown layer {layer!r} in {DOC.name}"
        rows += [(name, Place(layer, row)) for name in re.findall(r"`([^`]+)`", modules)]
    return rows


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in ("agentrt", "agenttui")
        for path in sorted((SRC / package).rglob("*.py"))
    }


def place_of(module: str, table: list[tuple[str, Place]]) -> Place | None:
    """The most exact entry of the table that names `module` (a name beats a pattern)."""

    def covers(pattern: str) -> bool:
        if pattern.endswith("*"):
            return fnmatch.fnmatchcase(module, pattern)
        return module == pattern

    matches = [(not p.endswith("*"), len(p), place) for p, place in table if covers(p)]
    return max(matches, key=lambda m: (m[0], m[1]))[2] if matches else None


def import_statements(module: str, path: Path) -> Iterator[tuple[str | None, list[str]]]:
    """Each import statement of `module`, wherever it is: (the module a ``from`` names, names).

    For a plain ``import``, the module is None and the names are the modules imported.
    """
    is_package = path.name == "__init__.py"
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield None, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield target, [alias.name for alias in node.names]


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The agentrt and agenttui modules `module` imports, wherever the import statement is."""
    found: set[str] = set()
    for source, names in import_statements(module, path):
        # `from . import x` and `from .pkg import mod` import modules, not names.
        targets = names if source is None else [source, *(f"{source}.{n}" for n in names)]
        found |= {t for t in targets if t in known}
    found.discard(module)
    return found


def test_every_module_sits_in_one_layer() -> None:
    table = read_table()
    unplaced = [m for m in modules() if place_of(m, table) is None]
    assert unplaced == [], f"add these to the layer table in {DOC.name}: {unplaced}"
    named = [p for p, _ in table if not p.endswith("*")]
    assert [n for n in named if n not in modules()] == [], "the table names a module that is gone"


def test_no_import_goes_up_a_layer_or_across_front_ends() -> None:
    table = read_table()
    known = modules()
    wrong: list[str] = []
    for module, path in known.items():
        here = place_of(module, table)
        assert here is not None
        for target in sorted(imports_of(module, path, set(known))):
            there = place_of(target, table)
            assert there is not None
            if there.rank > here.rank:
                wrong.append(f"{module} ({here.row}) imports {target} ({there.row})")
            elif here.layer == there.layer == "front-end" and here.row != there.row:
                wrong.append(f"{module} ({here.row}) imports the peer {target} ({there.row})")
    assert wrong == []


def test_the_check_sees_an_import_that_goes_up(tmp_path: Path) -> None:
    # The check itself: a protocol module importing the store would be caught.
    table = read_table()
    frames = place_of("agentrt.protocol.frames", table)
    store = place_of("agentrt.store.sqlite", table)
    assert frames is not None and store is not None
    assert store.rank > frames.rank
    fake = tmp_path / "frames.py"
    fake.write_text("from ..store.sqlite import TaskStore\n")
    assert imports_of("agentrt.protocol.frames", fake, set(modules())) == {"agentrt.store.sqlite"}


def private_store_names(module: str, path: Path) -> list[str]:
    """The underscore names `module` imports from another module of `agentrt.store`."""
    return [
        f"{source}.{name}"
        for source, names in import_statements(module, path)
        if source is not None
        and source != module
        and (source == "agentrt.store" or source.startswith("agentrt.store."))
        for name in names
        if name.startswith("_")
    ]


def test_no_module_imports_a_private_name_of_the_store_package() -> None:
    # The backends share `agentrt.store.sql`, `columns` and `writer` through their public
    # names; nothing in src/ reaches into a store module for an underscore name.
    wrong = {m: names for m, path in modules().items() if (names := private_store_names(m, path))}
    assert wrong == {}


def test_the_check_sees_a_private_name_of_the_store_package(tmp_path: Path) -> None:
    fake = tmp_path / "postgres.py"
    fake.write_text("from .sql import SqlStore, _Memory\nfrom .postgres import _local\n")
    assert private_store_names("agentrt.store.postgres", fake) == ["agentrt.store.sql._Memory"]


#: The folders of `agentrt/`, each the layer it says.
FOLDERS = {
    "vocab": "vocabulary",
    "protocol": "protocol",
    "core": "runtime",
    "agent": "runtime",
    "store": "runtime",
    "models": "runtime",
    "fleet": "runtime",
    "config": "runtime",
    "present": "runtime",
    "frontends": "front-end",
    "apps": "applications",
}

#: The modules at the top of `agentrt/`: its public names, re-exported from the folders.
PUBLIC = {
    "__init__",
    "__main__",
    "client",
    "codec",
    "frames",
    "providers",
    "http",
    "bots",
    "daemon",
}


def test_each_folder_of_agentrt_is_one_layer() -> None:
    table = read_table()
    package = SRC / "agentrt"
    folders = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(FOLDERS)
    wrong = []
    for module in modules():
        parts = module.split(".")
        if parts[0] == "agentrt" and len(parts) >= 2 and parts[1] in FOLDERS:
            place = place_of(module, table)
            assert place is not None
            if place.layer != FOLDERS[parts[1]]:
                wrong.append(f"{module} is in {parts[1]}/ but the table says {place.row}")
    assert wrong == []


def test_the_top_of_agentrt_holds_only_the_public_modules_and_they_define_nothing() -> None:
    package = SRC / "agentrt"
    assert {p.stem for p in package.glob("*.py")} == PUBLIC
    defining = []
    for name in sorted(PUBLIC - {"__main__"}):
        tree = ast.parse((package / f"{name}.py").read_text("utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) or (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                # the lazy loading of a module's names on first use
                and node.name not in {"__getattr__", "__dir__"}
            ):
                defining.append(f"agentrt/{name}.py defines {node.name}")
    assert defining == []

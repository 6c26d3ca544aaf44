"""Where the working folder holds the home folder, its startup files are read-only to tools.

A shell, a login or a desktop session runs them (``~/.bashrc``, ``~/.profile``,
``~/.config/autostart``), or they name programs for git and ssh to run
(``~/.gitconfig``, ``~/.ssh``): a tool that could write them could run
anything the next time the person opens a terminal. Each check is a real
command in a real bubblewrap.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from agentrt import open_runtime
from agentrt.agent.sandbox import HOME_STARTUP
from agentrt.agent.sandbox import Sandbox
from agentrt.agent.sandbox import home_startup_in
from agentrt.agent.toolproc import run_tool
from agentrt.core import runtime as runtime_module
from agentrt.models.scripted import ScriptedModel

pytestmark = pytest.mark.deadline(120)

FILES = {
    ".bashrc": "# bashrc\n",
    ".profile": "# profile\n",
    ".gitconfig": "[user]\n\tname = owner\n",
    ".ssh/config": "Host *\n",
    ".config/autostart/a.desktop": "[Desktop Entry]\n",
    ".local/bin/tool": "#!/bin/sh\n",
}


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home folder outside /tmp (the sandbox's own /tmp is private), as ``$HOME``."""
    folder = Path(tempfile.mkdtemp(prefix="agentrt-home-", dir="/var/tmp")).resolve()
    for name, text in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    monkeypatch.setenv("HOME", str(folder))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_they_are_covered_only_where_the_working_folder_holds_the_home_folder(
    home: Path,
) -> None:
    there = (".bashrc", ".profile", ".gitconfig", ".ssh", ".config/autostart", ".local/bin")
    expected = tuple(home / n for n in HOME_STARTUP if n in there)
    assert len(expected) == len(there)
    assert home_startup_in(home) == expected
    assert home_startup_in(home.parent) == expected
    (home / "project").mkdir()
    assert home_startup_in(home / "project") == ()  # the home is read-only there anyway


async def test_a_call_in_the_home_folder_cannot_change_them(home: Path) -> None:
    sandbox = Sandbox.detect()
    assert sandbox.enforced, sandbox.why
    command = (
        "echo x >> .bashrc; echo x >> ~/.profile; git config --global core.pager x; "
        "echo x >> .ssh/config; echo x > .config/autostart/b.desktop; echo x > .local/bin/ls; "
        "mv .bashrc moved; rm -f .profile; mv .config c2; mv .local l2; echo mine > notes.txt; "
        "echo x > .bash_profile; echo end"
    )
    argv = sandbox.wrap(["sh", "-c", command], workdir=home, network=False)
    with trio.fail_after(30):
        out = await run_tool(argv, cwd=home)
    said = out.output.decode()
    assert out.returncode == 0 and said.endswith("end\n"), said
    assert said.count("Read-only file system") == 5, said
    # git config, mv, rm, and the folders holding covered ones (moved, mounts and all, a
    # new one could be made in their place)
    assert said.count("Device or resource busy") == 5, said
    assert not (home / "c2").exists() and not (home / "l2").exists()
    for name, text in FILES.items():
        assert (home / name).read_text() == text, name
    assert not (home / ".config/autostart/b.desktop").exists()
    assert not (home / ".local/bin/ls").exists()
    assert not (home / "moved").exists()
    # The rest of the home is the working folder, as it was asked to be.
    assert (home / "notes.txt").read_text() == "mine\n"
    # A startup file that does not exist yet can be made (docs/security.md says so, and
    # agentrt warns at start): only what is there can be bound read-only.
    assert (home / ".bash_profile").read_text() == "x\n"


async def test_a_runtime_in_the_home_folder_says_so_once(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runtime_module, "_told_home", False)
    model = ScriptedModel(word_delay=0, stream_delay=0)
    for n in range(2):
        async with open_runtime(tmp_path / f"state{n}", model=model, workdir=home):
            pass
    err = capsys.readouterr().err
    assert err.count("agentrt: warning: ") == 1, err
    assert err == (
        f"agentrt: warning: the working folder {home} holds your home folder: tools may change "
        "what is in it; the startup files there (~/.bashrc, ~/.profile, ~/.gitconfig, ~/.ssh...) "
        "are read-only to them, but one that does not exist yet (~/.bash_profile, say) can be "
        "made; start agentrt in a project's folder (see docs/security.md)\n"
    )
    async with open_runtime(tmp_path / "state3", model=model, workdir=tmp_path):
        pass
    assert capsys.readouterr().err == ""

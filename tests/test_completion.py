"""Shell completion (click's): the source script for bash, zsh and fish is produced by the real
`hotfix` command, and bash completes commands and catalog hotfix ids with it (issue 24 item 10)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
MARKS = {"bash": "complete -o nosort -F _hotfix_completion hotfix", "zsh": "#compdef hotfix",
         "fish": "complete --no-files --command hotfix"}
SYNTAX = {"bash": ["bash", "-n"], "zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"]}


def hotfix() -> str:
    found = shutil.which("hotfix", path=str(BIN))
    if found is None:
        pytest.skip("the hotfix console script is not installed beside this interpreter")
    return found


def env() -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("_HOTFIX")},
            "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])}


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_source_script_is_produced(shell, tmp_path):
    done = subprocess.run([hotfix()], capture_output=True, text=True, env={**env(), "_HOTFIX_COMPLETE": f"{shell}_source"})
    assert done.returncode == 0, done.stderr
    assert MARKS[shell] in done.stdout and "_HOTFIX_COMPLETE" in done.stdout
    if shutil.which(SYNTAX[shell][0]) is None:
        return  # the script is checked by its own shell where that shell is installed
    script = tmp_path / f"hotfix.{shell}"
    script.write_text(done.stdout)
    syntax = subprocess.run([*SYNTAX[shell], str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


@pytest.mark.parametrize(("words", "expected"), [
    ("hotfix ap", {"apply"}),
    ("hotfix apply mamba", {"mamba-align-block-size"}),
    ("hotfix show qwen38-f", {"qwen38-flash-next"}),
])
def test_bash_completes_commands_and_hotfix_ids(words, expected):
    hotfix()
    line = f'eval "$(_HOTFIX_COMPLETE=bash_source hotfix)"; COMP_WORDS=({words}); COMP_CWORD={len(words.split()) - 1}; ' \
           '_hotfix_completion hotfix; printf "%s\\n" "${COMPREPLY[@]}"'
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == expected


def test_fish_completes_hotfix_ids_where_fish_is_installed(tmp_path):
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed (bash's completion is tested above)")
    script = tmp_path / "hotfix.fish"
    script.write_text(subprocess.run([hotfix()], capture_output=True, text=True, check=True,
                                     env={**env(), "_HOTFIX_COMPLETE": "fish_source"}).stdout)
    done = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C 'hotfix apply mam'"],
                          capture_output=True, text=True, env=env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["mamba-align-block-size"]

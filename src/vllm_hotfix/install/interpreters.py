"""The default interpreter: the one behind the `vllm` command (its script's shebang), and the interpreters a
machine likely has (on PATH, the usual venv and image locations) for `hotfix where` to list."""

from __future__ import annotations

import os
import sys
from pathlib import Path


SERVER_COMMAND = "vllm"
# Where container images and people put the interpreter that runs vLLM (listed in hints when nothing else works).
CANDIDATE_GLOBS = ("/opt/*/bin/python", "/opt/venv*/bin/python", "/venv/bin/python", "/workspace/*/bin/python",
                   "/vllm-workspace/*/bin/python", "/usr/local/bin/python3", "/usr/bin/python3")


def script_interpreter(script: Path) -> str | None:
    """The Python a console script (pip / uv / pipx entry point) runs: its shebang, including pip's
    ``#!/bin/sh`` + ``'''exec' /long/path/python "$0"`` form for long paths. None if not a Python script."""
    import shutil

    try:
        with open(script, "rb") as handle:
            head = handle.read(1024).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if words and words[0].endswith("/env") and len(words) > 1:
        words = words[1:]
        found = shutil.which(words[0]) if words[0] != "-S" else (shutil.which(words[1]) if len(words) > 1 else None)
        return found if found and "python" in Path(found).name else None
    if words and "python" in Path(words[0]).name:
        return words[0]
    if words and words[0] in ("/bin/sh", "/usr/bin/sh") and len(head) > 1 and head[1].startswith("'''exec' "):
        return head[1].split()[1]
    return None


def server_interpreter(path: str | None = None) -> tuple[Path, str] | None:
    """(the `vllm` command on PATH, the interpreter it runs), or None."""
    import shutil

    command = shutil.which(SERVER_COMMAND, path=path)
    if command is None:
        return None
    python = script_interpreter(Path(command))
    return (Path(command), python) if python and os.access(python, os.X_OK) else None


def candidate_interpreters(path: str | None = None, package: str = SERVER_COMMAND) -> list[str]:
    """Interpreters found on this machine that can import ``package`` (vllm, vllm_ascend), for a hint: each
    asked whether it finds the package (``importlib.util.find_spec``: the package is found, not imported);
    one that cannot, or does not answer in a few seconds, is not listed (a system python3 without vLLM)."""
    import shutil

    import glob

    found: list[str] = []
    for name in ("python3", "python"):
        on_path = shutil.which(name, path=path)
        if on_path:
            found.append(on_path)
    for pattern in CANDIDATE_GLOBS:
        found += sorted(glob.glob(pattern))
    own = os.path.realpath(sys.executable)
    unique = {os.path.realpath(p): p for p in reversed(found)}
    listed = [p for real, p in reversed(list(unique.items())) if real != own]
    return [p for p in listed if finds(p, package)]


FINDS = "import importlib.util, sys; print('found' if importlib.util.find_spec(sys.argv[1]) else 'absent')"


def finds(python: str, package: str, timeout: float = 10.0) -> bool:
    """Whether ``python`` finds ``package`` on its sys.path (without importing it: vLLM's import takes seconds)."""
    import subprocess

    try:
        done = subprocess.run([python, "-c", FINDS, package], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd="/", env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip() == "found"

"""install/bytecode.py against CPython's own import: for each kind of ``__pycache__`` entry (timestamp,
checked and unchecked hash-based, at every optimization level, with each ``--check-hash-based-pycs``
mode), the entry is judged stale exactly when importing the module in that interpreter runs the code of
the pyc rather than the source's. Every supported interpreter found here is asked (3.10-3.13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_hotfix_guard.install import bytecode
from vllm_hotfix.install.in_target import in_interpreter

import realdata

SOURCE = 'VALUE = "source"\n'
OTHER = 'VALUE = "pyc!!!"\n'  # as long as the source: a forged header keeps the size right

# Run in the interpreter under test: write a pyc for mod.py holding OTHER's code (or the source's own,
# or garbage), with the header asked for. argv: directory, kind, level, header (right | wrong), body.
FORGE = r'''
import importlib.util, marshal, os, sys
directory, kind, level, header, body = sys.argv[1:]
source = os.path.join(directory, "mod.py")
data = open(source, "rb").read()
level = int(level)
pyc = importlib.util.cache_from_source(source, optimization="" if level == 0 else level)
os.makedirs(os.path.dirname(pyc), exist_ok=True)
text = {"other": 'VALUE = "pyc!!!"\n', "own": data.decode()}.get(body)
payload = b"garbage" if text is None else marshal.dumps(compile(text, source, "exec", dont_inherit=True, optimize=level))
if kind == "timestamp":
    st = os.stat(source)
    mtime = int(st.st_mtime) + (0 if header == "right" else 7)
    fields = (0).to_bytes(4, "little") + (mtime & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
else:
    flags = 0b11 if kind == "checked" else 0b01
    digest = importlib.util.source_hash(data if header == "right" else data + b"#")
    fields = flags.to_bytes(4, "little") + digest
open(pyc, "wb").write(importlib.util.MAGIC_NUMBER + fields + payload)
'''

CASES = [(kind, level, header, body)
         for kind in ("timestamp", "checked", "unchecked")
         for level in (0, 1)
         for header in ("right", "wrong")
         for body in ("other", "own", "garbage")]
MODES = ("default", "always", "never")


def interpreters() -> list:
    """This interpreter (the fast layer), and the other supported ones found here (slow)."""
    found = [sys.executable]
    for version in ("3.10", "3.12", "3.13"):
        python = realdata.find_python(version)
        if python is not None:
            found.append(pytest.param(python, marks=pytest.mark.slow, id=f"python{version}"))
    return found


def imported_value(python: str, directory: Path, level: int, mode: str) -> str:
    """What `import mod` runs in that interpreter (-B: it writes no pyc of its own)."""
    flags = ["-B", "--check-hash-based-pycs", mode] + (["-O"] if level == 1 else [])
    done = subprocess.run([python, *flags, "-c", "import mod; print(mod.VALUE)"], cwd=directory,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(directory)})
    return done.stdout.strip() if done.returncode == 0 else "import failed"


def judged(python: str, directory: Path, mode: str) -> dict:
    source = Path(bytecode.__file__).read_text()
    done = subprocess.run([python, "--check-hash-based-pycs", mode, "-c", source],
                          input=repr([str(directory / "mod.py")]), capture_output=True, text=True, check=True)
    import ast

    return ast.literal_eval(done.stdout.strip().split(bytecode.MARKER, 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("python", interpreters())
def test_stale_exactly_when_the_import_runs_other_code(python, tmp_path):
    disagreements = []
    for index, (kind, level, header, body) in enumerate(CASES):
        directory = tmp_path / f"case{index}"
        directory.mkdir()
        (directory / "mod.py").write_text(SOURCE)
        subprocess.run([python, "-c", FORGE, str(directory), kind, str(level), header, body], check=True)
        for mode in MODES:
            value = imported_value(python, directory, level, mode)
            found = judged(python, directory, mode).get(str(directory / "mod.py"), [])
            stale = value != "source"
            if bool(found) != stale:
                disagreements.append((kind, level, header, body, mode, value, found))
    assert disagreements == []


def test_runs_in_the_target_interpreter_and_here(tmp_path):
    """locate.stale_bytecode: in-process for this interpreter (and --root), in the other one otherwise;
    the same answer for a pyc both interpreters would load (each judges its own cache tag)."""
    (tmp_path / "mod.py").write_text(SOURCE)
    subprocess.run([sys.executable, "-c", FORGE, str(tmp_path), "timestamp", "0", "right", "other"], check=True)
    here = in_interpreter(None, [str(tmp_path / "mod.py")])
    assert list(here) == [str(tmp_path / "mod.py")] and "holding other code" in here[str(tmp_path / "mod.py")][0][1]
    assert in_interpreter(sys.executable, [str(tmp_path / "mod.py")]) == here
    other = realdata.find_python("3.12") or realdata.find_python("3.10")
    if other is None:
        pytest.skip("no second interpreter here")
    assert in_interpreter(other, [str(tmp_path / "mod.py")]) == {}  # its cache tag has no entry
    subprocess.run([other, "-c", FORGE, str(tmp_path), "timestamp", "0", "right", "other"], check=True)
    (found,) = in_interpreter(other, [str(tmp_path / "mod.py")])[str(tmp_path / "mod.py")]
    assert found[0] != here[str(tmp_path / "mod.py")][0][0]  # another cache tag, another entry


def test_a_check_hands_its_compile_to_the_import_watch(tmp_path):
    (tmp_path / "mod.py").write_text(SOURCE)
    subprocess.run([sys.executable, "-c", FORGE, str(tmp_path), "timestamp", "0", "right", "own"], check=True)
    source = str(tmp_path / "mod.py")
    assert bytecode.stale_by_source([source]) == {}
    code = bytecode.compiled(source, SOURCE.encode(), 0)
    assert code is not None and code == compile(SOURCE, source, "exec", dont_inherit=True)
    assert bytecode.compiled(source, OTHER.encode(), 0) is None and bytecode.compiled(source, SOURCE.encode(), 1) is None

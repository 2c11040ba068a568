"""install/bytecode.py's judge run where the bytecode belongs: in the target interpreter.

install/bytecode.py itself is the self-contained script (it runs there, and in the guard's process);
this is hotfix's side of it: which interpreter, the source sent as ``PY -c``, the marker line read back.
"""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix_guard.errors import Refused, UsageError
from vllm_hotfix_guard.install import bytecode
from vllm_hotfix.install.locate import CHILD, PROBE_TIMEOUT, cannot_start, interpreter_path, is_this_interpreter


def in_interpreter(python: str | None, sources: list[str]) -> dict[str, list[tuple[str, str]]]:
    """install/bytecode.stale_by_source in ``python`` (the target interpreter: its cache tag, magic number and
    compiler), or in this process when that is hotfix's own interpreter or there is none (a --root
    checkout: judged for this interpreter). {source: [(pyc, why)]}."""
    sources = [s for s in sources if _has_entries(s)]
    if not sources:  # no entry at all beside them (the common case: apply dropped them): nothing to load
        return {}
    interpreter = interpreter_path(python) if python is not None else None
    if interpreter is None or is_this_interpreter(interpreter):
        return bytecode.stale_by_source(sources)
    import ast
    import subprocess

    source = Path(bytecode.__file__).read_text(encoding="utf-8")
    try:
        done = subprocess.run([interpreter, "-c", source], input=repr(list(sources)), capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT, **CHILD)
    except (OSError, ValueError) as exc:
        raise cannot_start(interpreter, exc) from None
    except subprocess.TimeoutExpired:
        raise Refused(f"checking the bytecode of {len(sources)} file(s) with {interpreter} took over "
                      f"{PROBE_TIMEOUT:.0f}s") from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(bytecode.MARKER):
            try:
                found = ast.literal_eval(line[len(bytecode.MARKER):])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                break
            if isinstance(found, dict):
                return {str(k): [(str(a), str(b)) for a, b in v] for k, v in found.items()}
            break
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise UsageError(f"--python {interpreter} could not check the bytecode (exit {done.returncode}): {last}",
                     hint="it must be a Python 3.10-3.13 interpreter")


def _has_entries(source: str) -> bool:
    """Whether any ``__pycache__`` entry of ``source`` exists, for any interpreter (with PYTHONPYCACHEPREFIX
    set the entries live elsewhere: then always true). A stat-level filter: the judge decides."""
    import os

    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return True
    folder, name = os.path.split(source)
    stem = name[:-3] if name.endswith(".py") else name
    try:
        return any(e.startswith(stem + ".") and e.endswith(".pyc") for e in os.listdir(os.path.join(folder, "__pycache__")))
    except OSError:
        return False

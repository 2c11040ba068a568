"""Ask the target interpreter what a fix changes in code (core/codeprint.py run there).

Code objects are an interpreter's own: the fingerprints `hotfix export` writes into the lock are those of
the interpreter that runs vLLM (``--python``), so core/codeprint.py's source runs there (``PY -c
SOURCE``, the request as a Python literal on stdin, the answer as one literal line after a marker), or
in this process when that interpreter is hotfix's own.
"""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix_guard.core import codeprint
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix.install.locate import CHILD, interpreter_path, is_this_interpreter

TIMEOUT = 120.0  # compiling a few vLLM files: seconds at most, even on a loaded machine


class Job:
    """One locked file of one hotfix: name the code its changed lines touch and fingerprint it."""

    __slots__ = ("key", "names_from", "regions", "code_from", "filename")

    def __init__(self, key, names_from: bytes, regions, code_from: bytes, filename: str) -> None:
        self.key, self.names_from, self.regions = key, names_from, list(regions)
        self.code_from, self.filename = code_from, filename


def ask(jobs: list[Job], python: str | None) -> tuple[str, dict]:
    """(the interpreter's cache tag, key -> [(qualname, kind, fingerprint | None)] or the SyntaxError text)."""
    request = [(j.key, j.names_from, j.regions, j.code_from, j.filename) for j in jobs]
    interpreter = interpreter_path(python)
    if is_this_interpreter(interpreter):
        answer = codeprint.answer(request)
    else:
        answer = _run(interpreter, request)
    return answer["interpreter"], answer["results"]


def _run(interpreter: str, request: list) -> dict:
    import ast
    import subprocess

    source = Path(codeprint.__file__).read_text(encoding="utf-8")
    try:
        done = subprocess.run([interpreter, "-I", "-c", source], input=repr(request), capture_output=True,
                              text=True, timeout=TIMEOUT, **CHILD)
    except subprocess.TimeoutExpired:
        raise Refused(f"--python {interpreter}: compiling the fixed files took over {TIMEOUT:.0f}s") from None
    except OSError as exc:
        raise Refused(f"--python {interpreter}: cannot be started to compile the fixed files ({exc.strerror or exc})") from None
    for line in done.stdout.splitlines():
        if line.startswith(codeprint.MARKER):
            try:
                answer = ast.literal_eval(line[len(codeprint.MARKER):])
            except (ValueError, SyntaxError):
                break
            if isinstance(answer, dict) and isinstance(answer.get("results"), dict) \
                    and isinstance(answer.get("interpreter"), str):
                return answer
            break
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise Refused(f"--python {interpreter} could not compile the fixed files (exit {done.returncode}): {last}",
                  hint="it must be a Python 3.10-3.13 interpreter")

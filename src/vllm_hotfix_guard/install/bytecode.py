"""Which ``__pycache__`` entries Python would load instead of a source file, and whether they hold its code.

A ``.pyc`` belongs to one interpreter version (its cache tag and magic number), so this runs in the
target interpreter: self-contained and stdlib only, like install/probe.py (``PY -c SOURCE``, a list of
source paths as a Python literal on stdin, one marker line back), and in-process in the guard (the vLLM
process is the target) and when the target is hotfix's own interpreter.

The rule is CPython's own, ``importlib._bootstrap_external.SourceLoader.get_code`` (3.7-3.13): for the
process's optimization level, ``cache_from_source(path)`` names the entry (``sys.pycache_prefix``
honoured); it is loaded instead of the source when its header has this interpreter's magic number and
valid flags, and then

- a timestamp pyc (flags 0): when bytes 8-12 equal ``int(st_mtime) & 0xFFFFFFFF`` of the source and
  bytes 12-16 its size ``& 0xFFFFFFFF``;
- a hash-based pyc (flag 1): *checked* (flag 2) when bytes 8-16 equal ``source_hash(source)``, unless the
  process runs with ``--check-hash-based-pycs never`` (then always); *unchecked* always, unless it runs
  with ``--check-hash-based-pycs always`` (then only with the right hash).

An entry Python loads is *stale* when its code is not the source's: ``marshal.loads`` of the rest is
compared with ``compile(source, path, "exec", dont_inherit=True, optimize=LEVEL)`` (code objects compare
their instructions, constants, names and line tables, not the file name); one that does not unmarshal
to a code object makes the import fail, so it is stale too. The check costs a compile only when such an
entry exists. Every optimization level is judged (a server may run with ``-O``); the hash-check mode is
this interpreter's own (``_imp.check_hash_based_pycs``: ``default`` unless it was started otherwise).
tests/target/test_bytecode.py checks the rule against what CPython's import really runs.
"""

import os
import sys

MARKER = "@@vllm-hotfix-bytecode@@"
LEVELS = (0, 1, 2)  # -O levels: '', 'opt-1', 'opt-2' entries

_compiled = {}  # source path -> (level, source bytes, code): what a check compiled, for the guard's import watch


def loaded_entry(source, level, data=None, stat=None, check_mode=None):
    """(the entry's path, its bytes, how it is validated) when the interpreter at optimization ``level``
    would load a pyc instead of ``source``, else None. ``data`` (the source's bytes) is read only when a
    checked hash must be compared."""
    import _imp
    from importlib.util import MAGIC_NUMBER, cache_from_source, source_hash

    try:
        pyc = cache_from_source(source, optimization="" if level == 0 else level)
    except (NotImplementedError, ValueError):
        return None
    try:
        with open(pyc, "rb") as fh:
            head = fh.read(16)
            if len(head) < 16 or head[:4] != MAGIC_NUMBER:
                return None
            flags = int.from_bytes(head[4:8], "little")
            if flags & ~0b11:
                return None
            if flags & 0b1:
                mode = check_mode or getattr(_imp, "check_hash_based_pycs", "default")
                checked = bool(flags & 0b10)
                how = "checked hash" if checked else "unchecked hash"
                if mode != "never" and (checked or mode == "always"):
                    if data is None:
                        with open(source, "rb") as src:
                            data = src.read()
                    if head[8:16] != source_hash(data):
                        return None
            else:
                info = stat if stat is not None else os.stat(source)
                if int.from_bytes(head[8:12], "little") != (int(info.st_mtime) & 0xFFFFFFFF) or \
                        int.from_bytes(head[12:16], "little") != (info.st_size & 0xFFFFFFFF):
                    return None
                how = "timestamp"
            return pyc, head + fh.read(), how
    except OSError:
        return None


def stale_entries(source, data=None):
    """[(pyc path, why)] for the entries of ``source`` that an interpreter like this one would load
    instead of it and that do not hold its code; [] when none (or the source cannot be read)."""
    import marshal

    try:
        info = os.stat(source)
        if data is None:
            with open(source, "rb") as fh:
                data = fh.read()
    except OSError:
        return []
    found = []
    for level in LEVELS:
        entry = loaded_entry(source, level, data, info)
        if entry is None:
            continue
        pyc, raw, how = entry
        try:
            code = marshal.loads(raw[16:])
        except (EOFError, ValueError, TypeError):
            code = None
        if not isinstance(code, type(stale_entries.__code__)):
            found.append((pyc, f"a {how} pyc that Python would load, but it does not hold code: the import fails"))
            continue
        try:
            own = compile(data, source, "exec", dont_inherit=True, optimize=level)
        except (SyntaxError, ValueError):
            own = None
        if own is not None:
            _compiled[source] = (level, data, own)
        if own != code:
            found.append((pyc, f"a {how} pyc that Python would load instead of the source, holding other code"))
    return found


def compiled(source, data, level):
    """The code a check compiled from exactly ``data`` at ``level`` (None if none): the guard's import
    watch compiles the same source, so the compile is paid once per process."""
    kept = _compiled.get(source)
    if kept is not None and kept[0] == level and kept[1] == data:
        return kept[2]
    return None


def stale_by_source(sources):
    """{source path: [(pyc path, why), ...]} for the sources with stale entries."""
    out = {}
    for source in sources:
        found = stale_entries(source)
        if found:
            out[source] = found
    return out


def main():
    import ast

    sources = ast.literal_eval(sys.stdin.read())
    sys.stdout.write(MARKER + repr(stale_by_source([str(s) for s in sources])) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

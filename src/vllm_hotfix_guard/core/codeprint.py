"""What a fix changes in code: the functions, methods and classes a change touches, and a fingerprint
of the code object each one compiles to.

A hotfix fixes a file; what runs is a function object. `hotfix export` names, per locked file, the
qualified names the hotfix's hunks touch (from the syntax tree of the patched file) with a fingerprint
of each one's code compiled from the fixed source; the in-process guard resolves those names in the
live modules after vLLM's plugins and platform patches have run (vllm_hotfix_guard/code.py).

Self-contained and stdlib only: export runs this file's source in the *target* interpreter (``PY -c
SOURCE``, a request literal on stdin, install/codeprobe.py), because code objects are that
interpreter's (``INTERPRETER``: its cache tag, e.g. ``cpython-311``); the guard imports it only to
fingerprint a live function that is not the one it compiled itself.

The fingerprint (``sha256`` hex) covers a code object's name, argument counts, flags, bytecode
(``co_code``: without the interpreter's specialisations), names, local / free / cell variable names,
exception table (3.11+) and constants, nested code objects by their own fingerprints, frozensets in a
sorted order (their iteration order follows string hashing, which changes between processes). It
leaves out the file name, the first line and the line table: the same source compiled at another
path or moved down a file is the same code. It is computed with ``optimize=0`` (the guard compares it
only where ``sys.flags.optimize`` is 0 too).
"""

from __future__ import annotations

import hashlib
import sys

FORMAT = "vllm-hotfix-code/1"
INTERPRETER = sys.implementation.cache_tag or sys.implementation.name  # the code objects' interpreter

CLASS, METHOD, FUNCTION = "class", "method", "function"
KINDS = (CLASS, METHOD, FUNCTION)

_OPTIMIZED = 0x0001  # CO_OPTIMIZED: a function's code (a class body and a module have it unset)


def module_name(path: str) -> str:
    """core/distname.module_name's rule (the guard's), copied: this file is sent whole to the target interpreter
    (install/codeprobe.py), where no vllm_hotfix_guard is; tests/core/test_distname.py holds the two to one answer."""
    module = path[:-3].replace("/", ".")
    return module[:-len(".__init__")] if module.endswith(".__init__") else module


def fingerprint(code) -> str:
    """The fingerprint of one code object (see the module docstring)."""
    return hashlib.sha256(repr(_canonical(code)).encode("utf-8", "surrogatepass")).hexdigest()


def combined(fingerprints) -> str:
    """One fingerprint for a name bound to several code objects (a property's getter and setter): the
    sorted fingerprints hashed together; a single one stays itself."""
    found = sorted(fingerprints)
    if len(found) == 1:
        return found[0]
    return hashlib.sha256(("\n".join([FORMAT, *found])).encode("ascii")).hexdigest()


def _canonical(code) -> tuple:
    return (FORMAT, code.co_name, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
            code.co_flags, code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
            getattr(code, "co_exceptiontable", b""), tuple(_constant(c) for c in code.co_consts))


def _constant(value) -> tuple:
    if hasattr(value, "co_code"):
        return ("code", fingerprint(value))
    if type(value) is tuple:
        return ("tuple", tuple(_constant(v) for v in value))
    if type(value) is frozenset:
        return ("frozenset", tuple(sorted(repr(_constant(v)) for v in value)))
    return (type(value).__name__, repr(value))


def code_objects(module_code) -> dict:
    """Every code object nested in a module's code, by qualified name (``Cls.meth``, ``f.<locals>.g``),
    in the order the compiler emitted them; a name may hold several (a property's getter and setter)."""
    found: dict = {}

    def walk(parent, prefix: str, in_function: bool) -> None:
        for const in parent.co_consts:
            if not hasattr(const, "co_code"):
                continue
            qualname = getattr(const, "co_qualname", None)
            if qualname is None:  # 3.10: derived as the compiler does
                qualname = f"{prefix}<locals>.{const.co_name}" if in_function else f"{prefix}{const.co_name}"
            found.setdefault(qualname, []).append(const)
            walk(const, qualname + ".", bool(const.co_flags & _OPTIMIZED))

    walk(module_code, "", False)
    return found


def touched(source: bytes, regions, filename: str = "<fixed>") -> list:
    """The (qualified name, kind) of each function, method or class the changed ``regions`` of ``source``
    touch: half-open 0-based line ranges of ``source`` (an empty one is a deletion between two lines: it
    touches what surrounds it, and a function whose last line is just above it). A change inside a function names that function (a nested function
    is part of its code); one in a class body outside its methods names the class; module-level lines
    name nothing. In source order, each once. SyntaxError when ``source`` does not parse here."""
    import ast

    tree = ast.parse(source, filename)
    text = source.splitlines()  # a blank or comment-only line added between methods changes no code
    regions = [(int(a), int(b)) for a, b in regions]
    names: dict = {}

    def span(node) -> tuple:
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        return first - 1, node.end_lineno

    def meets(node_span: tuple, region: tuple) -> bool:
        (n0, n1), (r0, r1) = node_span, region
        if r0 == r1:  # lines deleted here: inside the node, or right after its last line (its last statement)
            return n0 < r0 <= n1
        return r0 < n1 and n0 < r1

    def outside(region: tuple, spans: list) -> bool:
        """Does ``region`` change a line of the class body that is in none of these methods / classes?"""
        r0, r1 = region
        if r0 == r1:
            return not any(s0 < r0 <= s1 for s0, s1 in spans)
        lines = set(range(r0, r1)).difference(*(range(s0, s1) for s0, s1 in spans))
        return any(i < len(text) and text[i].strip() and not text[i].lstrip().startswith(b"#") for i in lines)

    def visit(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                where = span(node)
                hits = [r for r in regions if meets(where, r)]
                if not hits:
                    continue
                qualname = prefix + node.name
                inner = [child for child in node.body if isinstance(child, (ast.ClassDef, ast.FunctionDef,
                                                                            ast.AsyncFunctionDef))]
                if any(outside(r, [span(child) for child in inner]) for r in hits):
                    names.setdefault(qualname, CLASS)  # a line of the class body itself (or its decorators)
                visit(inner, qualname + ".")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(meets(span(node), r) for r in regions):
                    names.setdefault(prefix + node.name, METHOD if prefix else FUNCTION)

    visit(tree.body, "")
    return list(names.items())


def fingerprints(source: bytes, qualnames, filename: str = "<fixed>") -> dict:
    """qualified name -> fingerprint of its code compiled here from ``source`` (None: not defined there)."""
    codes = code_objects(compile(source, filename, "exec", dont_inherit=True, optimize=0))
    return {name: (combined(fingerprint(c) for c in codes[name]) if name in codes else None) for name in qualnames}


def answer(request) -> dict:
    """One request of install/codeprobe.py, answered in this interpreter: for each job ``(key, names_from,
    regions, code_from, filename)`` the touched names of ``names_from`` and their fingerprints in
    ``code_from`` (the file that runs: the top of a series), or the SyntaxError that stopped it."""
    results = {}
    for key, names_from, regions, code_from, filename in request:
        try:
            names = touched(names_from, regions, filename)
            prints = fingerprints(code_from, [n for n, _ in names], filename)
            results[key] = [(name, kind, prints[name]) for name, kind in names]
        except (SyntaxError, ValueError) as exc:  # ValueError: source with NUL bytes
            results[key] = f"{type(exc).__name__}: {exc}"
    return {"interpreter": INTERPRETER, "results": results}


MARKER = "@@vllm-hotfix-codeprint@@"


def _main() -> None:
    import ast

    request = ast.literal_eval(sys.stdin.read())
    sys.stdout.write(MARKER + repr(answer(request)) + "\n")


if __name__ == "__main__":
    _main()

"""The one distribution-name normaliser for stdlib-only code (the guard, locks, records): packaging's rule
(``packaging.utils.canonicalize_name``, PEP 503: lower case, each run of ``-``, ``_``, ``.`` one ``-``),
without ``re`` (the guard compiles no pattern in a vLLM process). Code that may import packaging calls
``canonicalize_name`` itself; tests/core/test_distname.py checks that the two agree, and that
install/probe.py's own copy (it is sent whole to the target interpreter) does too."""

from __future__ import annotations


def canonical_name(name: str) -> str:
    """``Vllm_Ascend`` / ``vllm.ascend`` / ``vllm--ascend`` -> ``vllm-ascend``."""
    out: list[str] = []
    for ch in name.lower():
        if ch in "-_.":
            if not out or out[-1] != "-":
                out.append("-")
        else:
            out.append(ch)
    return "".join(out)


def import_name(name: str) -> str:
    """The import name a command looks for when given ``name``: an import name stays as it is; a distribution
    name (it has a ``-``: no import name has) becomes its canonical name with ``_``, the wheel rule (PEP 427),
    which is the top-level package of every distribution in this catalog (``vllm-ascend`` -> ``vllm_ascend``,
    ``Vllm-Ascend`` too). A distribution whose import name is unrelated (PyYAML -> yaml) is given by that."""
    return canonical_name(name).replace("-", "_") if "-" in name else name


def module_name(path: str) -> str:
    """The module a site-packages-relative ``.py`` path is: ``vllm/config/cache.py`` -> ``vllm.config.cache``, a
    package's ``__init__.py`` its package. The one rule of the import watch (plugin.py: what it watches), the code
    check (code.py: where the fixed names live); core/codeprint.py, sent whole to target interpreters, keeps a copy
    (tests/core/test_distname.py holds them to one answer)."""
    module = path[:-3].replace("/", ".")
    return module[:-len(".__init__")] if module.endswith(".__init__") else module

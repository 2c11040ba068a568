"""The guard's check that the fixed function is the one running. Stdlib only.

A hotfix fixes a file; what runs is a function object, and a vLLM plugin or a platform patch can bind
another one in its place (``MambaHybridModelState.add_request = mine``), swap its ``__code__``, or hold
an alias taken before the fix. The lock names, per file, the functions, methods and classes the fix
touches and a fingerprint of each one's code (core/codeprint.py). Here, at the points where vLLM's
patches have run (points.py), each name is resolved in the live module -- a method through its
class's MRO, as an instance would find it -- and judged:

- ``in effect``: the fixed code is bound (the very object the import watch compiled from the verified
  source, else code with the fixed fingerprint);
- ``wrapped``: another callable is bound and the fixed code is reachable from it (``__wrapped__``, a
  closure cell, a global its code reads, a subclass of the fixed class): it runs if the wrapper calls it;
- ``shadowed``: other code runs; the line names the replacement's module and line (or, for a
  ``__code__`` swap, where the new code was written);
- ``stale-alias``: a module that did ``from x import f`` holds a copy of ``f`` from before the fix
  (scanned: the modules of vLLM's plugins, and every module once an earlier copy of the fixed module
  is known to have existed);
- ``not loaded``: the module is not imported in this process (nothing of it runs here).

Strict mode stops a serving process on ``shadowed`` and ``stale-alias``.
"""

from __future__ import annotations

import os
import sys

from vllm_hotfix_guard import codestate
from vllm_hotfix_guard.verdicts import (
    IN_EFFECT, NOT_LOADED, SHADOWED, STALE_ALIAS, STOPS, WRAPPED, Found, HotfixNotInEffect, Locked, Verdict)
from vllm_hotfix_guard.process import emit, process_role, serving_process, strict
from vllm_hotfix_guard.settings import READY_DIR_ENV

_by_module: dict = {}   # module name -> [Locked]
_seen: dict = {}        # module name -> id() of the first module object seen / loaded under that name
_last: dict = {}        # what this process last said: {"key": ..., "pid": ...}


def locked_of(checks) -> tuple[list, bool]:
    """The locked names of the files in effect (txn/lock_check.HotfixCheck) as verdicts.Locked, and whether the
    lock's fingerprints hold for this interpreter (its cache tag; a record's names carry none: compiled here).
    What ``take`` needs, as plain values: lock_cache.py keeps them for the container's later processes."""
    from vllm_hotfix_guard.core.distname import module_name

    interpreter = sys.implementation.cache_tag
    found, usable = [], []
    for check in checks:
        for locked, file in zip(check.hotfix.files, check.files):
            if locked.code is None or not locked.path.endswith(".py") or file.where is None \
                    or file.sha256 is None or file.sha256 != file.expected:
                continue
            if locked.code.interpreter:
                usable.append(locked.code.interpreter == interpreter)
            module = module_name(locked.path)
            found.extend(Locked(check.hotfix.id, module, name.name, name.kind, name.fingerprint, file.where,
                                file.sha256) for name in locked.code.names)
    return found, bool(usable) and all(usable)


def start(checks, plugins=()) -> None:
    """``take`` the locked names of ``checks`` (``locked_of``)."""
    take(*locked_of(checks), plugins=plugins)


def take(names, usable: bool, plugins=()) -> None:
    """Take these locked names (verdicts.Locked) and note which module objects this process holds already.
    ``usable``: the names' fingerprints hold for this interpreter. ``plugins``: vLLM's plugin callables, whose
    packages are scanned for stale aliases."""
    _by_module.clear()
    for locked in names:
        _by_module.setdefault(locked.module, []).append(locked)
    codestate.LOCK_PRINTS["usable"] = usable and not sys.flags.optimize
    for module in _by_module:
        found = sys.modules.get(module)
        if found is not None:
            _seen.setdefault(module, id(found))
    note_plugins(plugins)


def active() -> bool:
    return bool(_by_module)


def locked_files() -> dict:
    """The real path of each locked Python file with code names -> its hotfix id (compiled.py)."""
    return {locked.path: locked.hotfix_id for names in _by_module.values() for locked in names}


def note_plugins(plugins) -> None:
    for func in plugins:
        top = str(codestate.attr(func, "__module__", None) or "").partition(".")[0]
        if top and top not in ("vllm", "vllm_hotfix", "vllm_hotfix_guard"):
            codestate.PLUGIN_PACKAGES.add(top)


def loaded(name: str, module):
    """The import watch executed ``module`` from the verified source: record what each locked name is
    bound to now (the fixed objects), and whether an earlier copy of the module existed. Returns the
    module's locked names (None: it has none), which the caller hands to watch.py."""
    names = _by_module.get(name)
    if names is None:
        return None
    from vllm_hotfix_guard.judge import MISSING, codes_of, resolve  # here: register() never judges (codestate.py)

    first = _seen.setdefault(name, id(module))
    if first != id(module):
        codestate.EARLIER.add(name)
    for locked in names:
        binding = resolve(module, locked.qualname)
        if binding is not MISSING:
            codestate.FIXED[(name, locked.qualname)] = (binding, codes_of(binding))
    return names


def judge_all() -> list:
    """Every locked name as it is bound now in this process, then the stale aliases of the loaded ones.
    judge.py is imported only for a fixed module that is loaded (at register() it usually is not yet)."""
    found = []
    stale_in = []
    for module, names in _by_module.items():
        live = sys.modules.get(module)
        if live is None:
            found.extend(Found(n, NOT_LOADED) for n in names)
            continue
        from vllm_hotfix_guard import judge as judging

        if _seen.setdefault(module, id(live)) != id(live):
            codestate.EARLIER.add(module)
        found.extend(judging.judge(n, live) for n in names)
        stale_in.append((module, live, names))
    if stale_in:
        found.extend(judging.stale_aliases(stale_in))
    return found


# -- what this process says ------------------------------------------------------------------------


REMEDY = {
    SHADOWED: "another function runs instead of the fix: remove or update the plugin or patch that binds it, "
              "or make it call the fixed function (through __wrapped__)",
    STALE_ALIAS: "that module took its copy before the fix: import it after the fixed module is loaded "
                 "(or re-export the plugin against the fixed release)",
}


def quote_path(text: str) -> str:
    """output.quote_path (the one way an outside string is printed), imported only for a name that needs
    it: a process whose fixed functions run prints plain module names and never imports output."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return text
    from vllm_hotfix_guard.output import quote_path as quoted

    return quoted(text)


def describe(f: Found) -> str:
    """One name's part of a code line: ``ID MODULE:QUALNAME STATE [by CULPRIT]``."""
    name = f"{f.locked.hotfix_id} {quote_path(f.locked.module)}:{f.locked.qualname}"
    if f.state == IN_EFFECT or f.state == NOT_LOADED:
        return f"{name} {f.state}"
    if f.state == WRAPPED:
        return f"{name} wrapped by {quote_path(f.culprit)}"
    if f.state == STALE_ALIAS:
        return f"{name} STALE-ALIAS: {quote_path(f.holder)} holds {quote_path(f.culprit)}"
    return f"{name} SHADOWED by {quote_path(f.culprit)}"


def remedies(found: list) -> str:
    said = [REMEDY[state] for state in (SHADOWED, STALE_ALIAS) if any(f.state == state for f in found)]
    return (" -> " + "; ".join(said)) if said else ""


def verdicts(found: list) -> tuple:
    """The failing names as parts of the guard's summary line (source ``code``): one per hotfix."""
    by_id: dict = {}
    for f in found:
        if f.state in STOPS:
            what = (f"{f.locked.qualname} held by {quote_path(f.holder)}: {quote_path(f.culprit)}"
                    if f.state == STALE_ALIAS else f"{f.locked.qualname} by {quote_path(f.culprit)}")
            by_id.setdefault(f.locked.hotfix_id, []).append((f, f"{f.state}: {what}"))
    return tuple(Verdict(hotfix_id, False, "; ".join(text for _, text in parts),
                         remedies([f for f, _ in parts])[4:], "code") for hotfix_id, parts in by_id.items())


def line(point: str, found: list) -> str:
    return (f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: code {point}: "
            + "; ".join(describe(f) for f in found) + remedies(found))


def checkpoint(point: str) -> None:
    """Judge every locked name now (a point where vLLM's patches have run, points.py); say it when
    it differs from what this process said last; stop a strict serving process on shadowed/stale-alias."""
    if not _by_module:
        return
    try:
        found = judge_all()
    except Exception as exc:  # noqa: BLE001 - a bug here must not take vLLM down
        emit("ERROR", f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: code {point}: internal error: "
                      f"{type(exc).__name__}: {exc} (report it to vllm-hotfix)")
        return
    say(point, found)
    failing = [f for f in found if f.state in STOPS]
    if failing and strict():
        message = stop_message(point, failing)
        if serving_process():
            raise HotfixNotInEffect(message)
        emit("WARNING", f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: not stopping this command "
                        f"(HOTFIX_STRICT=1): it serves nothing")


def say(point: str, found: list, *, again: bool = False) -> None:
    """Log the code line of ``point`` unless this process said the same last (``again``: a rebinding
    seen as it happened is always said)."""
    text = line(point, found)
    key = "; ".join(f"{f.locked.module}:{f.locked.qualname}={f.state}:{f.culprit}:{f.holder}" for f in found)
    if not again and _last.get("key") == key and _last.get("pid") == os.getpid():
        return
    _last.update(key=key, pid=os.getpid())
    failing = any(f.state in STOPS for f in found)
    if serving_process() or failing:
        emit("ERROR" if failing else "INFO", text)
    if failing and os.environ.get(READY_DIR_ENV, "").strip():  # the readiness record follows the latest verdict
        from vllm_hotfix_guard.ready import failed

        failed(f.locked.hotfix_id for f in found if f.state in STOPS)


def stop_message(point: str, failing: list) -> str:
    details = "; ".join(describe(f) for f in failing) + remedies(failing)
    return (f"vllm-hotfix: {len(failing)} fixed function(s) not the one running in this process (pid {os.getpid()}, "
            f"{process_role()}) {point}, refusing to serve (HOTFIX_STRICT=1; unset it to only log): {details}")

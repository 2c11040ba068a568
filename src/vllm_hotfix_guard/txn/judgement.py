"""THE verdict on a target's record: whether each recorded hotfix is what `hotfix apply` wrote, and whether it
is in effect. The commands (flow/survey, flow/plan, flow/rollback_change, doctor, contains) and the in-process
guard (HOTFIX_REQUIRE) all call ``judge_record``; the words and their precedence are core.verdict.hotfix_state's.

A record is a claim. Before its hashes decide anything, ``record_problem`` checks, in this order (the
first problem makes every hotfix of the target ``unknown``):

1. every step changes its file (a before-hash equal to its after-hash would call any file "patched");
2. the steps of each file chain (core.verdict.series_checks);
3. the seal: a record hotfix wrote carries ``txn.state.seal_of`` its claims; a hand edit breaks it;
4. the kept patches: each one's bytes have the sha256 the record names;
5. the origin: on the recorded release of a wheel, each file's first step starts from pip's RECORD;
6. the pin (``pinned``: the catalog's md5 / sha256 of the patches, ``pin_problem``; the commands pass the
   catalog they loaded, the guard the one at hand in its process: vllm_hotfix_guard/pins.py);
7. the derivation (txn/derive.py): the kept originals and recorded patches give every recorded state of
   every file, the top included. The commands derive always (``derive=True``); the guard derives only
   records without a seal (written before seals), and otherwise relies on 3 + 4 -- the engine it would
   import and run costs more than its budget (docs/design.md, "What the guard proves").

Then the release the record is judged against (core.verdict.release_seen), the record's own ``fixed_in``
/ ``versions`` (or, for older records, the catalog's rule: ``inapplicable``), core.verdict.hotfix_state, and for
an applied hotfix its modules' bytecode (``bytecode``: install/bytecode.py's rule, run in the target
interpreter). Stdlib only, slotted values: the guard imports it in every vLLM process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from vllm_hotfix_guard.core import pep440, verdict
from vllm_hotfix_guard.txn.state import TargetState, seal_of
from vllm_hotfix_guard.values import Value


class Found(Value):
    """A file as read: its bytes and mode (what install/tree.Tree.read gives the commands)."""

    data: bytes
    mode: int


class Judged(Value):
    """One recorded hotfix judged on the install (core.verdict's state) and the facts behind the word."""

    hotfix_id: str
    version: Any
    state: verdict.State
    detail: str
    files: tuple  # core.verdict.FileCheck, each with the sha256 the file has now
    installed: Optional[str]  # the release it was judged against (core.verdict.release_seen)
    distribution: Optional[str]
    release_change: Optional[str] = None  # why the installed release is not the recorded one (None: it is)
    bytecode: tuple = ()  # (source path, pyc path, why) of the entries Python would load instead of a source

    @property
    def in_effect(self) -> bool:
        return verdict.in_effect(self.state)


def bounded_reader(root: Path, cap: int) -> Callable[[str], Optional[Found]]:
    """The guard's reader of target files (the commands use install/tree.Tree): a regular file, no
    symlink followed, never blocking, at most ``cap`` bytes; None for anything else (not in effect)."""
    import os

    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.inputs import read_bounded

    def read(path: str) -> Optional[Found]:
        where = Path(root) / path
        try:
            data = read_bounded(where, cap=cap, what="patched file", follow_symlinks=False)
            return Found(data, os.lstat(where).st_mode)
        except (InvalidInput, OSError):
            return None
    return read


def _sha256(data: Optional[bytes]) -> Optional[str]:
    import hashlib

    return None if data is None else hashlib.sha256(data).hexdigest()


def pin_problem(state: TargetState, recorded, pins, ref: str) -> Optional[str]:
    """Why a catalog hotfix's record does not keep exactly the patch bytes its manifest pins (check 6), or
    None: ``pins`` are the manifest's (md5 or None, sha256 or None) of the patches for the release the
    record was made on, ``ref`` its name. `status` (flow/hotfix.pin_problem, from the catalog it loaded) and
    the guard (vllm_hotfix_guard/pins.py, from the catalog at hand in the process) both ask this."""
    import hashlib

    if len(pins) != len(recorded.patches):
        return f"{recorded.id}: the record keeps {len(recorded.patches)} patch(es), {ref} pins {len(pins)}"
    for (md5, sha256), rel in zip(pins, recorded.patches):
        data = state.read_patch(rel)
        if data is None:
            return f"{state.directory / rel}: the recorded patch of {recorded.id} is gone"
        for kind, wanted, actual in (("md5", md5, lambda: hashlib.md5(data, usedforsecurity=False).hexdigest()),
                                     ("sha256", sha256, lambda: _sha256(data))):
            if wanted is not None and actual() != wanted:
                return (f"{state.directory / rel}: {kind} mismatch: expected {wanted}, got {actual()} "
                        f"(the catalog's pin of {ref})")
    return None


def record_problem(state: TargetState, install, read: Callable, *, derive: bool,
                   pinned: Optional[Callable] = None) -> Optional[str]:
    """Why this record is not what hotfix wrote for this install (module docstring, checks 1 and 3-7;
    2 is ``judge_record``'s), or None. ``install``: the Target (commands) or the guard's view of it
    (``root``, ``kind``, ``dist_info``, ``version``)."""
    for recorded in state.hotfixes.values():
        for f in recorded.files:
            if f.before_sha256 == f.after_sha256:
                return (f"{recorded.id}'s record says it changed {f.path} from sha256 {str(f.before_sha256)[:12]} "
                        f"to the same bytes: a hotfix changes every file it records")
    unsealed = set()
    for recorded in state.hotfixes.values():
        if recorded.seal is None:
            unsealed.add(recorded.id)
        elif recorded.seal != seal_of(state.target, recorded):
            return f"{recorded.id}'s record was changed after hotfix wrote it (its seal does not match what it says)"
        for rel, pin in zip(recorded.patches, recorded.patch_sha256):
            data = state.read_patch(rel)
            if data is None:
                return f"{state.directory / rel}: the kept patch of {recorded.id} is gone"
            if _sha256(data) != pin:
                return f"{state.directory / rel}: the kept patch of {recorded.id} is not the one it was applied with"
    if install.kind == "wheel" and install.dist_info is not None and \
            pep440.same_release(state.target.get("version"), install.version):
        from vllm_hotfix_guard.install.facts import record_sha256s  # the origin, against pip's own RECORD

        paths = {path for _, steps in state.series() for path, _, _ in steps}
        problem = verdict.origin_problem(state.series(), record_sha256s(install.dist_info, paths))
        if problem is not None:
            return problem
    for recorded in state.hotfixes.values() if pinned is not None else ():
        problem = pinned(recorded)
        if problem is not None:
            return problem
    if derive or unsealed:
        from vllm_hotfix_guard.txn.derive import Derivation

        derivation = Derivation(state, read)
        paths = [p for p, chain in derivation.chains.items() if derive or any(s[0] in unsealed for s in chain)]
        return derivation.problem(paths)
    return None


def judge_record(state: TargetState, install, *, read: Callable, pending: bool, derive: bool = True,
                 pinned: Optional[Callable] = None, inapplicable: Optional[Callable] = None,
                 bytecode: Optional[Callable] = None) -> dict[str, Judged]:
    """{hotfix id: Judged} for every hotfix of ``state`` (the record of ``install``'s root), in series order.

    ``read(path)``: the file as it is (``Found``-like) or None; ``pending``: a journal waits for `recover`;
    ``derive``, ``pinned``: see ``record_problem``; ``inapplicable(recorded)``: the catalog's (state,
    detail) for a record that does not carry its own ``fixed_in`` / ``versions``; ``bytecode(sources)``:
    {real source path: [(pyc, why)]} for the modules of applied hotfixes (None: not judged)."""
    root = str(install.root)
    found: dict = {}

    def current(path: str) -> tuple:
        if path not in found:
            got = read(path)
            found[path] = _sha256(got.data if got is not None else None)
        return found[path], f"{root}/{path}"

    series = state.series()
    try:
        checks = verdict.series_checks(series, current)
        broken = None
    except verdict.BrokenSeries as exc:  # each hotfix alone, for the files it names (the fingerprint)
        checks = {hid: verdict.chain_checks_each(steps, current) for hid, steps in series}
        broken = str(exc)
    if broken is None and state.hotfixes:
        broken = record_problem(state, install, read, derive=derive, pinned=pinned)
    now, moved, changed = release_of(state, install)
    distribution = install.distribution or install.package
    out: dict[str, Judged] = {}
    for recorded in state.hotfixes.values():
        if recorded.fixed_in or recorded.versions:
            why_not = verdict.release_rule(now, fixed_in=recorded.fixed_in, versions=recorded.versions,
                                           distribution=distribution)
        else:
            why_not = inapplicable(recorded) if inapplicable is not None else None
        if why_not is not None and why_not[0] == verdict.FIXED_UPSTREAM and changed is not None:
            why_not = (why_not[0], f"{distribution} was changed from {state.target.get('version')} to {now} under "
                                   f"the record, which has the fix ({why_not[1]})")
        files = checks.get(recorded.id, ())
        word, detail = verdict.hotfix_state(files, pending=pending, broken=broken, inapplicable=why_not,
                                     recorded_release=state.target.get("version"), installed_release=now,
                                     moved=moved, distribution=distribution)
        out[recorded.id] = Judged(recorded.id, recorded.version, word, detail, files, now, install.distribution,
                                  changed)
    if bytecode is not None:
        _judge_bytecode(out, bytecode)
    return out


def release_of(state: TargetState, install) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(the release the record is judged against, how a checkout's HEAD moved or None, why that is another
    release than the recorded one or None): core.verdict.release_seen + release_change with what this
    record and install say -- for the verdict, and for apply (a new series) and rollback (forget)."""
    paths = {path for _, steps in state.series() for path, _, _ in steps}
    now, moved = verdict.release_seen(
        recorded=state.target.get("version"), installed=lambda: install.version,
        recorded_commit=state.target.get("commit"), commit=install.commit,
        own_version_file=lambda: install.version_file in paths)
    return now, moved, verdict.release_change(state.target.get("version"), now, moved,
                                              install.distribution or install.package)


def _judge_bytecode(judged: dict, bytecode: Callable) -> None:
    """STALE_BYTECODE for the applied hotfixes whose modules Python would load from a stale pyc."""
    sources = sorted({f.where for j in judged.values() if j.state == verdict.APPLIED for f in j.files
                      if f.where and f.path.endswith(".py") and f.sha256 is not None})
    stale = bytecode(sources) if sources else {}
    if not stale:
        return
    from vllm_hotfix_guard.output import quote_path

    for hotfix_id, j in list(judged.items()):
        entries = tuple((f.where, pyc, why) for f in j.files if f.where in stale for pyc, why in stale[f.where])
        if j.state != verdict.APPLIED or not entries:
            continue
        source, pyc, why = entries[0]
        more = f" (+{len(entries) - 1} more)" if len(entries) > 1 else ""
        word, detail = verdict.hotfix_state(j.files, stale_bytecode=f"Python would load {quote_path(pyc)} instead of "
                                                              f"{quote_path(source)}: {why}{more}")
        judged[hotfix_id] = Judged(j.hotfix_id, j.version, word, detail, j.files, j.installed, j.distribution,
                                   j.release_change, entries)


def fingerprint_entries(judged) -> list:
    """core.fingerprint entries of judged hotfixes: id, version, distribution, the release they were judged
    against and each file's sha256 now -- the same for the same bytes in every reader."""
    from vllm_hotfix_guard.core.fingerprint import Entry

    return [Entry(j.hotfix_id, j.version, j.distribution, j.installed, tuple((f.path, f.sha256) for f in j.files))
            for j in judged]

"""The guard's derivation of its verdicts in this process (what `register()` does when the container's lock verdict
cache has no entry that holds, lock_cache.py): the lock's half (its trust verdict, txn/lock_check on the install
this process loads, with its bytecode), HOTFIX_REQUIRE's half (required.py), one verdict per id, the fingerprint,
the modules to watch; then offered to the cache (lock_inputs.offer). Also the API `hotfix status --runtime` asks
(``judge_process``). Stdlib only."""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix_guard.settings import required_ids
from vllm_hotfix_guard.verdicts import Verdict, Watched

CODE_CHECKS: list = []  # the lock's checks and the required records' of this process: their code names (points.py)
DERIVED: dict = {}  # the last derivation's lock and installs, by package (for lock_inputs.offer)
LOCK_SHA256: list = [None]  # of the lock bytes this process judged: its readiness record names them (read once)


def derive(lock: str, require: str, hit) -> tuple:
    """(verdicts, watched modules, fingerprint, locked code names, whether their fingerprints hold here) derived in
    this process from HOTFIX_LOCK / HOTFIX_REQUIRE (``hit``: lock_cache.lookup's miss, whose lock bytes are judged
    and to which the derivation is then offered; None without the cache)."""
    DERIVED.clear()
    derived = check_all(lock=lock or None, require=required_ids(require), data=hit.data if hit else None)
    names, usable = [], False
    if any(f.code is not None for check in CODE_CHECKS for f in check.hotfix.files):
        from vllm_hotfix_guard.code import locked_of

        names, usable = locked_of(CODE_CHECKS)
    if hit is not None and hit.key is not None and DERIVED.get("lock") is not None:
        offer_here(hit, lock, derived, names, usable)
    return (*derived, names, usable)


def offer_here(hit, lock: str, derived: tuple, names: list, usable: bool) -> None:
    """Leave this derivation for the container's later processes (lock_inputs.offer decides whether it may)."""
    try:
        from vllm_hotfix_guard.lock_inputs import offer
        from vllm_hotfix_guard.trust import CACHED, TRUST_ID

        checks, installed, sha256 = list(CODE_CHECKS), dict(DERIVED["installed"]), LOCK_SHA256[0]

        def again() -> tuple:
            try:
                return check_all(lock=lock, require=(), data=hit.data)
            finally:
                CODE_CHECKS[:], LOCK_SHA256[0] = checks, sha256

        trust = [v for v in derived[0] if v.hotfix_id == TRUST_ID]
        offer(hit, lock_path=lock, lock=DERIVED["lock"], installed=installed, checks=checks, derived=derived,
              names=names, usable=usable, trust_cached=all(v.detail.startswith(CACHED) for v in trust), again=again)
    except Exception:  # noqa: BLE001 - the cache only saves time: a failure to keep it costs the next process a derivation
        pass


def judge_process(*, lock: str | None, require: tuple, names: str | None = None, plugins=()) -> tuple:
    """``register()``'s verdicts here and now (the lock's and the records' files with their bytecode, then the
    code check of the lock's names) and the fingerprint, not logged: `hotfix status --runtime` asks it after
    vLLM's plugins ran. ``names``: a lock read for its code names only (a record's); ``plugins``: vLLM's
    plugin callables (their packages are scanned for stale aliases, as from its loader)."""
    verdicts, _, fingerprint = check_all(lock=lock, require=require)
    checks = CODE_CHECKS if lock or not names else (check_lock(Path(names))[1] or [])
    if any(f.code is not None for check in checks for f in check.hotfix.files):
        verdicts += __import__("vllm_hotfix_guard.points", fromlist=["start"]).start(checks, plugins)[0]
    return verdicts, fingerprint


def check_all(*, lock: str | None, require: tuple[str, ...], data: bytes | None = None
               ) -> tuple[tuple[Verdict, ...], tuple[Watched, ...], str]:
    """check_with_modules, plus the fingerprint (core/fingerprint.py) of every hotfix checked, computed from
    the same checks (each file is found and hashed once per process): a hotfix both locked and required
    counts once, as the lock has it -- the fingerprint `verify --lock` and `status` print for those bytes."""
    from vllm_hotfix_guard.core.fingerprint import NONE, fingerprint as digest

    results: list[tuple[Verdict, tuple]] = []  # (verdict, (hotfix id, its FileChecks) or None)
    entries: dict = {}  # hotfix id -> core.fingerprint.Entry
    locked, checks = check_lock(Path(lock), data) if lock else ([], None)
    results.extend(locked)
    CODE_CHECKS[:] = checks or ()
    if checks is not None:  # a lock that loaded
        from vllm_hotfix_guard.txn.lock_check import fingerprint_entries

        entries.update((e.id, e) for e in fingerprint_entries(checks))
    if require:
        from vllm_hotfix_guard.required import check_required_ids

        required, judged = check_required_ids(require)
        results.extend(required)
        from vllm_hotfix_guard.recorded import CHECKS  # the required records' code names (recorded.py)
        locked_ids = {c.hotfix.id for c in CODE_CHECKS if any(f.code is not None for f in c.hotfix.files)}
        CODE_CHECKS.extend(c for c in CHECKS if c.hotfix.id not in locked_ids)
        from vllm_hotfix_guard.txn.judgement import fingerprint_entries as record_entries

        for entry in record_entries(judged):
            entries.setdefault(entry.id, entry)
    fingerprint = digest(entries.values()) if entries else NONE
    verdicts: dict[str, Verdict] = {}
    for v, _ in results:
        seen = verdicts.get(v.hotfix_id)
        if seen is None:
            verdicts[v.hotfix_id] = v
        else:  # in both HOTFIX_LOCK and HOTFIX_REQUIRE: one line, the failing verdict if any, both sources
            kept = seen if (not seen.in_effect or v.in_effect) else v
            verdicts[v.hotfix_id] = Verdict(kept.hotfix_id, kept.in_effect, kept.detail, kept.remedy,
                                            f"{seen.source}+{v.source}")
    return tuple(verdicts.values()), watched_of([f for _, f in results if f is not None]), fingerprint


def watched_of(checked) -> tuple[Watched, ...]:
    """The Python modules among the files the hotfixes patched, at the path this process resolves."""
    from vllm_hotfix_guard.core.distname import module_name

    found: dict[str, Watched] = {}
    for hotfix_id, files in checked:
        for file in files:
            if file.where and file.expected and file.path.endswith(".py"):
                module = module_name(file.path)
                found.setdefault(module, Watched(module, hotfix_id, file.where, file.expected))
    return tuple(found.values())


def check_lock(path: Path, data: bytes | None = None) -> tuple[list[tuple[Verdict, tuple]], list | None]:
    import shlex

    from vllm_hotfix_guard.installed import installed
    from vllm_hotfix_guard.trust import read_lock_here
    from vllm_hotfix_guard.txn.lock_check import check_lock
    from vllm_hotfix_guard.wording import python_option, verdict_of

    lock, lines, LOCK_SHA256[0] = read_lock_here(path, data)  # None: unusable; lines: its (lock) / (trust) verdicts
    usable = lock is not None and all(v.in_effect for v, _ in lines)  # a refused lock is not checked further
    seen: dict = {}

    def resolve(package: str):
        seen[package] = installed(package)
        return seen[package]

    # install/bytecode.py's rule in this very process (its cache tag, its hash-check mode): a stat per level, a
    # compile only when an entry would be loaded, and that compile is what the import watch then uses
    from vllm_hotfix_guard.install.bytecode import stale_by_source

    checks = check_lock(lock, resolve, bytecode=stale_by_source) if usable else None
    DERIVED.update(lock=lock if usable else None, installed=seen)
    option = f"--lock {shlex.quote(str(path))} {python_option()}"
    return lines + [(verdict_of(c.hotfix.id, c.hotfix.package, c.state, c.detail, c.files, c.installed_version, "lock",
                              option, c.unnamed), (c.hotfix.id, c.files)) for c in checks or ()], checks

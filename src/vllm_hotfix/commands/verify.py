"""`hotfix verify`: exit 0 only when every recorded (or locked) hotfix is in effect."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix_guard.errors import NotInEffect
from vllm_hotfix_guard.lockreport import without_state


def run(*, hotfix_ids: Sequence[str], python: str | None, root: Path | None, lock_file: Path | None,
        catalogs: Sequence[Path], as_json: bool) -> int:
    if lock_file:
        return _verify_lock(Path(lock_file), ids=tuple(hotfix_ids), python=python, catalogs=catalogs, as_json=as_json)
    return _verify_recorded(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs, as_json=as_json)


def _verify_recorded(*, hotfix_ids, python, root, catalogs, as_json: bool) -> int:
    """Every named (else every recorded) hotfix must be applied or fixed upstream."""
    from vllm_hotfix_guard.core.verdict import IN_EFFECT
    from vllm_hotfix.flow.resolve import warn
    from vllm_hotfix.flow.survey import survey
    from vllm_hotfix_guard.output import emit_json, say

    targets: list = []
    statuses = survey(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs, with_catalog=False,
                      targets=targets)
    for target in targets:
        warn(target)
    if not statuses:
        # Passing on "nothing recorded" would hide exactly the rebuild that also lost the record.
        raise NotInEffect(
            f"nothing to verify: no hotfix is named and none is recorded for {target_words(targets, python, root)}",
            hint="name the hotfixes that must be in effect (`hotfix verify ID...`) or use `--lock FILE`",
        )
    from vllm_hotfix.flow.mounted import mount_sources
    from vllm_hotfix.flow.survey import fingerprint

    problems = [s for s in statuses if s.state not in IN_EFFECT]
    digest = fingerprint(statuses)
    if as_json:
        emit_json([dict(s.to_json(), fingerprint=digest) for s in statuses])
    else:
        for s in statuses:
            if s.state in IN_EFFECT:
                mounted = f" through a bind mount from {mount_sources(s.mounts)}" if s.mounts else ""
                say(f"in effect: {s.id}@{s.version} ({s.state}, {s.target}){mounted}")
            else:
                say(f"NOT IN EFFECT: {s.id} is {s.state}: {without_state(s.state, s.detail)}".rstrip(": "))
            if s.to_do:
                say(f"  to do: {s.to_do}")
        say(f"fingerprint: {digest}")
    return int(NotInEffect.exit_code) if problems else 0


def target_words(targets: list, python: str | None, root: Path | None) -> str:
    """The target(s) a command looked at, quoted, for a message: each resolved root (and its release), else
    the --root / --python it was given, else the interpreter hotfix chose for it."""
    from vllm_hotfix_guard.output import quoted

    if targets:
        return " and ".join(quoted(str(t.root)) + (f" ({t.distribution or t.package} {t.version})" if t.version else "")
                            for t in targets)
    if root is not None:
        return f"the checkout {quoted(str(root))}"
    return f"the interpreter {quoted(python)}" if python else "the interpreter hotfix chose (no --python given)"


# -- --lock: the container entrypoint guard --------------------------------------------------------

def _verify_lock(lock_file: Path, *, ids: tuple[str, ...], python: str | None, catalogs=(), as_json: bool) -> int:
    """guard/lockreport.verify_lock (the one answer, also the in-container `verify`'s) on the install the
    Resolver finds: the interpreter that runs vLLM, probed."""
    from vllm_hotfix.flow.resolve import Resolver
    from vllm_hotfix_guard import lockreport
    from vllm_hotfix_guard.install.probe import GUARD_ENTRY_POINTS

    # its probe also reads the guard's entry points there (loading it would cost a probe process ~35 ms at
    # every container start: `hotfix guard --check-env` does; in this process it is loaded, at no cost)
    resolver = Resolver(python, guard=GUARD_ENTRY_POINTS)
    resolver.prefetch()  # the probe's interpreter starts while the rest loads and the lock is read

    def resolve(package: str):
        from vllm_hotfix_guard.paths import TargetDir
        from vllm_hotfix_guard.txn import lock_check

        target = resolver.package(package)  # the one resolution every command uses
        return lock_check.Installed(Path(target.package_dir), target.version, TargetDir.of(target.root).pending(),
                                  target.distribution)

    def stale(sources: list[str]) -> dict:
        from vllm_hotfix.install.in_target import in_interpreter

        return in_interpreter(resolver.python, sources)  # judged in the interpreter checked (its cache tag)

    checker = lockreport.Checker(
        resolve=resolve, bytecode=stale, option=lambda: _lock_option(resolver, catalogs),
        mount=lambda: _lock_mounts(resolver), interpreter_note=lambda h, code: _interpreter_note(resolver, h, code),
        guard_environment=lambda as_json: _guard_environment(resolver, as_json))
    return lockreport.verify_lock(lock_file, checker, ids=ids, as_json=as_json)



def _interpreter_note(resolver, hotfix, code) -> str:
    """Where the lock's fingerprints were computed by another interpreter than the one checked: the guard
    then proves a function by the code it compiled itself (docs: "The fixed function is the one running")."""
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.lockreport import interpreter_note

    try:
        version = resolver.package(hotfix.package).python_version
    except HotfixError:
        return ""
    return interpreter_note(version, code)


def _lock_option(resolver, catalogs) -> str:
    """``--python`` of the interpreter the lock was checked in, and the --catalog dirs given
    (resolve.catalog_words: `verify --lock` loads no catalog), for the advice."""
    import shlex
    import sys

    from vllm_hotfix.flow.resolve import catalog_words

    python = next((t.python for t in resolver.resolved() if t.python), None) or resolver.python
    words = ["--python", python or sys.executable, *catalog_words(None, catalogs)]
    return " ".join(shlex.quote(w) for w in words)


def _lock_mounts(resolver):
    """(package, site-packages-relative path) -> where the file's bind mount comes from (None: not a mount)."""
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.install.mounts import mount_table, mounted_files

    table = mount_table()

    def mount(package: str, path: str) -> dict | None:
        try:
            base = Path(resolver.package(package).package_dir).parent  # what lock paths are relative to
        except HotfixError:
            return None
        found = mounted_files(base, [path], table).get(path)
        return found.to_json() if found is not None else None

    return mount


def _guard_environment(resolver, as_json: bool) -> bool:
    """The in-process guard cannot report that vLLM never loads it: say so here, about the interpreter the
    lock was checked in (its probe read the entry points there)."""
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.env import environment_problems
    from vllm_hotfix_guard.lockreport import guard_lines, guard_wanted

    try:
        target = resolver.guard_target()
    except HotfixError:  # vLLM is not importable there: the lock's own check said so
        target = None
    facts = target.guard if target is not None else None
    problems = environment_problems(entry_points=facts.entry_points if facts else None,
                                    load_error=facts.load_error if facts else None,
                                    python=target.python if target is not None else None)
    return guard_lines(problems, wanted=guard_wanted(), as_json=as_json)

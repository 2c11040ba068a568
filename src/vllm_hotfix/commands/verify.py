"""`hotfix verify`: exit 0 only when every recorded (or locked) hotfix is in effect."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix.errors import NotInEffect


def run(*, hotfix_ids: Sequence[str], python: str | None, root: Path | None, lock_file: Path | None,
        catalogs: Sequence[Path], as_json: bool) -> int:
    if lock_file:
        return _verify_lock(Path(lock_file), ids=tuple(hotfix_ids), python=python, catalogs=catalogs, as_json=as_json)
    return _verify_recorded(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs, as_json=as_json)


def _verify_recorded(*, hotfix_ids, python, root, catalogs, as_json: bool) -> int:
    """Every named (else every recorded) hotfix must be applied or fixed upstream."""
    from vllm_hotfix.core.verdict import IN_EFFECT
    from vllm_hotfix.flow.resolve import warn
    from vllm_hotfix.flow.survey import survey
    from vllm_hotfix.output import emit_json, say

    targets: list = []
    statuses = survey(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs, with_catalog=False,
                      targets=targets)
    for target in targets:
        warn(target)
    if not statuses:
        # Passing on "nothing recorded" would hide exactly the rebuild that also lost the record.
        raise NotInEffect(
            "nothing to verify: no hotfix is named and none is recorded for this target",
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
                say(f"NOT IN EFFECT: {s.id} is {s.state}: {_without_state(s.state, s.detail)}".rstrip(": "))
            if s.to_do:
                say(f"  to do: {s.to_do}")
        say(f"fingerprint: {digest}")
    return int(NotInEffect.exit_code) if problems else 0


def _without_state(state: str, detail: str) -> str:
    """The detail without a leading repeat of the state word ("not-applicable: not applicable: ...")."""
    for word in (state, state.replace("-", " ")):
        if detail.lower().startswith(word + ":"):
            return detail[len(word) + 1:].lstrip()
    return detail


# -- --lock: the container entrypoint guard --------------------------------------------------------

def _verify_lock(lock_file: Path, *, ids: tuple[str, ...], python: str | None, catalogs=(), as_json: bool) -> int:
    if "\0" in str(lock_file):
        from vllm_hotfix.errors import InvalidInput

        raise InvalidInput(f"--lock / HOTFIX_LOCK {str(lock_file)!r}: holds a NUL byte; no file has such a name")
    from vllm_hotfix.flow.resolve import Resolver

    from vllm_hotfix.install.probe import GUARD_ENTRY_POINTS

    # its probe also reads the guard's entry points there (loading it would cost a probe process ~35 ms at
    # every container start: `hotfix guard --check-env` does; in this process it is loaded, at no cost)
    resolver = Resolver(python, guard=GUARD_ENTRY_POINTS)
    resolver.prefetch()  # the probe's interpreter starts while the rest loads and the lock is read

    from vllm_hotfix.txn import hotfix_lock, lock_check
    from vllm_hotfix.core.verdict import APPLIED, FIXED_UPSTREAM
    from vllm_hotfix.output import emit_json, say

    data, lock = hotfix_lock.read_lock(lock_file)
    refused, trust_json = _trust_step(lock_file, data, lock, as_json)
    if refused:
        return refused

    def resolve(package: str) -> lock_check.Installed:
        from vllm_hotfix.paths import TargetDir

        target = resolver.package(package)  # the one resolution every command uses
        return lock_check.Installed(Path(target.package_dir), target.version, TargetDir.of(target.root).pending(),
                                  target.distribution)

    def stale(sources: list[str]) -> dict:
        from vllm_hotfix.install.in_target import in_interpreter

        return in_interpreter(resolver.python, sources)  # judged in the interpreter checked (its cache tag)

    checks = lock_check.check_lock(lock, resolve, ids, bytecode=stale)
    option = _lock_option(resolver, catalogs)
    report = [(check, lock_check.advice(check, lock_check.mount_line_for(lock_file), option)) for check in checks]
    all_in_effect = all(check.in_effect for check in checks)
    digest = lock_check.fingerprint(checks)

    if as_json:
        mount = _lock_mounts(resolver)
        emit_json([
            {
                "id": c.hotfix.id,
                "version": c.hotfix.version,
                "state": c.state,
                "installed_version": c.installed_version,
                "detail": c.detail,
                "files": [
                    {"path": f.path, "state": f.state, "real_path": f.where, "sha256": f.sha256,
                     "expected_sha256": locked.sha256, "baseline_sha256": locked.baseline_sha256,
                     "mount": mount(c.hotfix.package, f.path), "code": locked.code.to_json() if locked.code else None}
                    for f, locked in zip(c.files, c.hotfix.files)
                ],
                "advice": advice,
                "fingerprint": digest,
                **({"trust": trust_json} if trust_json is not None else {}),
            }
            for c, advice in report
        ])
    else:
        for check, advice in report:
            h = check.hotfix
            if check.state == APPLIED:
                say(f"in effect: {h.id}@{h.version} ({len(h.files)} file(s), {h.distribution} {check.installed_version})")
                for locked in h.files:
                    if locked.code is not None:
                        say(f"  {locked.path}: {locked.code.describe()}{_interpreter_note(resolver, h, locked.code)}")
            elif check.state == FIXED_UPSTREAM:
                say(f"fixed-upstream: {h.id}: {advice}")
            else:
                say(f"NOT IN EFFECT: {h.id}@{h.version} is {check.state}: {_without_state(check.state, check.detail)}")
                for line in (advice or "").splitlines():
                    say(f"  {line}")
        if not checks:
            say(f"{lock_file}: no hotfixes locked")
        else:
            say(f"fingerprint: {digest}")
    guard_ok = _guard_environment(resolver, as_json)
    return 0 if all_in_effect and guard_ok else int(NotInEffect.exit_code)


def _interpreter_note(resolver, hotfix, code) -> str:
    """Where the lock's fingerprints were computed by another interpreter than the one checked: the guard
    then proves a function by the code it compiled itself (docs: "The fixed function is the one running")."""
    from vllm_hotfix.errors import HotfixError

    try:
        version = resolver.package(hotfix.package).python_version
    except HotfixError:
        return ""
    if not version:
        return ""
    here = "cpython-" + "".join(version.split(".")[:2])
    if here == code.interpreter:
        return ""
    return f" (this interpreter is Python {version}: the guard compares the code it compiles there)"


def _trust_step(lock_file: Path, data: bytes, lock, as_json: bool) -> tuple[int, dict | None]:
    """The trust policy (--trust / HOTFIX_TRUST / the image's pinned one) on the lock's bytes: (exit code
    of its refusal or 0, its JSON or None without a policy). A refused lock is not checked further: what
    it claims is nobody's word. Its lines: each refusal on stdout, warnings on stderr."""
    import time

    from vllm_hotfix.output import emit_json, note, quote_path, say
    from vllm_hotfix.txn import signed

    now = time.time()
    policy = signed.load_policy(now=now)
    if policy is None:
        return 0, None
    verdict = signed.lock_verdict(lock_file, data, lock, policy, now=now, subject=quote_path(str(lock_file)))
    for warning in verdict.warnings:
        note(warning)
    if not verdict.trusted:
        if as_json:
            emit_json({"trust": verdict.to_json()})
        else:
            for refusal in verdict.refusals:
                say(refusal.line)
        return verdict.exit_code, verdict.to_json()
    if not as_json:
        say(f"trusted: {verdict.summary()}")
    return 0, verdict.to_json()


def _lock_option(resolver, catalogs) -> str:
    """``--python`` of the interpreter the lock was checked in, and the --catalog dirs given, for the advice."""
    import shlex
    import sys

    python = next((t.python for t in resolver.resolved() if t.python), None) or resolver.python
    words = ["--python", python or sys.executable]
    for folder in catalogs:
        words += ["--catalog", str(Path(folder).absolute())]
    return " ".join(shlex.quote(w) for w in words)


def _lock_mounts(resolver):
    """(package, site-packages-relative path) -> where the file's bind mount comes from (None: not a mount)."""
    from vllm_hotfix.errors import HotfixError
    from vllm_hotfix.install.mounts import mount_table, mounted_files

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
    lock was checked in (its probe read the entry points there). A problem fails the check when this
    environment turns the guard on (HOTFIX_LOCK / HOTFIX_REQUIRE), else it is a note."""
    import os

    from vllm_hotfix.guard.env import environment_problems
    from vllm_hotfix.errors import HotfixError
    from vllm_hotfix.output import note, say

    try:
        target = resolver.guard_target()
    except HotfixError:  # vLLM is not importable there: the lock's own check said so
        target = None
    facts = target.guard if target is not None else None
    problems = environment_problems(entry_points=facts.entry_points if facts else None,
                                    load_error=facts.load_error if facts else None,
                                    python=target.python if target is not None else None)
    from vllm_hotfix.settings import LOCK_ENV, REQUIRE_ENV

    wanted = any(os.environ.get(name, "").strip() for name in (LOCK_ENV, REQUIRE_ENV))
    for problem in problems:
        line = f"NOT IN EFFECT: guard: {problem}" if wanted else f"the in-process guard would not load: {problem}"
        (note if as_json or not wanted else say)(line)
    return not (wanted and problems)

"""`verify --lock`'s one answer: the trust step, the check, the lines (or JSON), the fingerprint and the exit code.

Two callers give it the install: `hotfix verify --lock` on the host (commands/verify.py: the Resolver's
probe of the interpreter that runs vLLM) and `python -m vllm_hotfix_guard verify` in the container
(vllm_hotfix_guard/incontainer.py: this very process). Everything else -- verdicts, words, fingerprint, exit codes --
is decided here, once. Stdlib only: it travels in the guard's distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional


@dataclass(frozen=True, slots=True, kw_only=True)
class Checker:
    """How one caller sees the install the lock is checked against."""

    resolve: Callable  # package -> lock_check.Installed-like, or None (not importable)
    bytecode: Callable  # sources -> install/bytecode.stale_by_source's answer, in the interpreter checked
    option: Callable[[], str]  # `--python P [--catalog D]` for the advice, once the packages are resolved
    mount: Callable[[], Callable]  # -> (package, path) -> the file's bind mount as JSON, or None
    interpreter_note: Callable  # (hotfix, code) -> "" or the note on another interpreter's fingerprints
    guard_environment: Callable[[bool], bool]  # as_json -> whether the guard would load (False fails the check)


def verify_lock(lock_file: Path, checker: Checker, *, ids: tuple[str, ...] = (), as_json: bool = False) -> int:
    """0 when every locked (or named) hotfix is in effect and the guard would load; NotInEffect's code
    otherwise; a refused lock's trust code; a lock that does not parse raises InvalidInput (exit 8)."""
    from vllm_hotfix_guard.errors import InvalidInput, NotInEffect
    from vllm_hotfix_guard.txn import hotfix_lock, lock_check

    if "\0" in str(lock_file):
        raise InvalidInput(f"--lock / HOTFIX_LOCK {str(lock_file)!r}: holds a NUL byte; no file has such a name")
    data, lock = hotfix_lock.read_lock(lock_file)
    refused, trust_json = trust_step(lock_file, data, lock, as_json)
    if refused:
        return refused
    checks = lock_check.check_lock(lock, checker.resolve, ids, bytecode=checker.bytecode)
    option = checker.option()
    report = [(check, lock_check.advice(check, lock_check.mount_line_for(lock_file), option)) for check in checks]
    digest = lock_check.fingerprint(checks)
    if as_json:
        _emit_json(report, checker.mount(), digest, trust_json)
    else:
        _say_lines(lock_file, report, checker, digest)
    guard_ok = checker.guard_environment(as_json)
    return 0 if all(check.in_effect for check in checks) and guard_ok else int(NotInEffect.exit_code)


def _emit_json(report, mount, digest: str, trust_json: Optional[dict]) -> None:
    from vllm_hotfix_guard.output import emit_json

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


def _say_lines(lock_file: Path, report, checker: Checker, digest: str) -> None:
    from vllm_hotfix_guard.core.verdict import APPLIED, FIXED_UPSTREAM
    from vllm_hotfix_guard.output import say

    for check, advice in report:
        h = check.hotfix
        if check.state == APPLIED:
            say(f"in effect: {h.id}@{h.version} ({len(h.files)} file(s), {h.distribution} {check.installed_version})")
            for locked in h.files:
                if locked.code is not None:
                    say(f"  {locked.path}: {locked.code.describe()}{checker.interpreter_note(h, locked.code)}")
        elif check.state == FIXED_UPSTREAM:
            say(f"fixed-upstream: {h.id}: {advice}")
        else:
            say(f"NOT IN EFFECT: {h.id}@{h.version} is {check.state}: {without_state(check.state, check.detail)}")
            for line in (advice or "").splitlines():
                say(f"  {line}")
    if not report:
        say(f"{lock_file}: no hotfixes locked")
    else:
        say(f"fingerprint: {digest}")


def without_state(state: str, detail: str) -> str:
    """The detail without a leading repeat of the state word ("not-applicable: not applicable: ...")."""
    for word in (state, state.replace("-", " ")):
        if detail.lower().startswith(word + ":"):
            return detail[len(word) + 1:].lstrip()
    return detail


def interpreter_note(version: Optional[str], code) -> str:
    """Where the lock's fingerprints were computed by another interpreter than the one checked (Python
    ``version``): the guard then proves a function by the code it compiles itself."""
    if not version:
        return ""
    here = "cpython-" + "".join(version.split(".")[:2])
    if here == code.interpreter:
        return ""
    return f" (this interpreter is Python {version}: the guard compares the code it compiles there)"


def trust_step(lock_file: Path, data: bytes, lock, as_json: bool) -> tuple[int, Optional[dict]]:
    """The trust policy (--trust / HOTFIX_TRUST / the image's pinned one) on the lock's bytes: (exit code
    of its refusal or 0, its JSON or None without a policy). A refused lock is not checked further: what
    it claims is nobody's word. Its lines: each refusal on stdout, warnings on stderr."""
    import time

    from vllm_hotfix_guard.output import emit_json, note, quote_path, say
    from vllm_hotfix_guard.txn import signed

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


def guard_lines(problems: list[str], *, wanted: bool, as_json: bool) -> bool:
    """The guard-environment problems as `verify --lock` prints them: they fail the check when this
    environment turns the guard on (HOTFIX_LOCK / HOTFIX_REQUIRE), else each is a note."""
    from vllm_hotfix_guard.output import note, say

    for problem in problems:
        line = f"NOT IN EFFECT: guard: {problem}" if wanted else f"the in-process guard would not load: {problem}"
        (note if as_json or not wanted else say)(line)
    return not (wanted and problems)


def guard_wanted() -> bool:
    import os

    from vllm_hotfix_guard.settings import LOCK_ENV, REQUIRE_ENV

    return any(os.environ.get(name, "").strip() for name in (LOCK_ENV, REQUIRE_ENV))

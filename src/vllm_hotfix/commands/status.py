"""`hotfix status`: one state per hotfix and target, decided from the files themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix.output import emit_json, say

MARKS = {"applied": "ok", "fixed-upstream": "ok", "not-applied": "--", "not-applicable": "--"}


def derived_versions(targets: list) -> dict[str, str]:
    """root -> 'vllm 0.30.0 at ROOT: version derived from git tag v0.30.0' for targets whose version is
    derived from a checkout (install/version.py), not read from installed metadata."""
    return {str(t.root): f"{t.distribution or t.package} {t.version} at {t.root}: version derived from {t.version_from}"
            for t in targets if t.version_from and t.version}


def version_fields(status, targets: list) -> dict:
    """The target's version as the survey resolved it, what it was derived from (None: installed metadata),
    and its warnings (a PYTHONPATH overlay shadowing the install, ...: flow.resolve.warn says them)."""
    target = next((t for t in targets if str(t.root) == status.target), None)
    return {"installed_version": status.installed_version,
            "version_from": target.version_from if target is not None else None,
            "warnings": list(target.warnings) if target is not None else []}


def run(*, hotfix_ids: Sequence[str], python: str | None, root: Path | None, catalogs: Sequence[Path],
        as_json: bool) -> int:
    """Exit 1 when a named or recorded hotfix is not in effect (catalog extras only inform)."""
    from vllm_hotfix.core.verdict import IN_EFFECT
    from vllm_hotfix.errors import NotInEffect

    from vllm_hotfix.flow.status import fingerprint

    from vllm_hotfix.flow.resolve import warn
    from vllm_hotfix.flow.status import survey

    targets: list = []
    statuses = survey(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs, with_catalog=True,
                      targets=targets)
    for target in targets:
        warn(target)
    named = bool(hotfix_ids)
    counted = [s for s in statuses if named or s.recorded]  # these decide the exit code, and the fingerprint
    code = int(NotInEffect.exit_code) if any(s.state not in IN_EFFECT for s in counted) else 0
    digest = fingerprint(counted)
    if as_json:
        emit_json([dict(s.to_json(), fingerprint=digest, **version_fields(s, targets)) for s in statuses])
        return code
    if not statuses:
        say("no hotfix recorded, and no catalog hotfix targets a package of this interpreter")
        return 0
    width = max(len(s.id) for s in statuses)
    for s in statuses:  # recorded ones in series order (their place in it first, like `quilt applied`)
        version = f"@{s.version}" if s.version is not None else ""
        place = f"{s.position}." if s.position is not None else ""
        say(f"{MARKS.get(s.state, '!!')} {place:>3} {s.id:<{width}} {s.state:<14} {version} {s.target}".rstrip())
        if s.detail:
            say(f"     {s.detail}")
        if s.to_do:
            say(f"     to do: {s.to_do}")
    for line in derived_versions(targets).values():
        say(line)
    if counted:
        say(f"fingerprint: {digest}")
    return code

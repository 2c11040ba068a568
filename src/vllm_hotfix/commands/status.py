"""`hotfix status`: one state per hotfix and target, decided from the files themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix.output import emit_json, say

MARKS = {"applied": "ok", "fixed-upstream": "ok", "not-applied": "--", "not-applicable": "--"}


def run(*, hotfix_ids: Sequence[str], python: str | None, root: Path | None, catalogs: Sequence[Path],
        as_json: bool) -> int:
    """Exit 1 when a named or recorded hotfix is not in effect (catalog extras only inform)."""
    from vllm_hotfix.core.verdict import IN_EFFECT
    from vllm_hotfix.errors import NotInEffect

    from vllm_hotfix.flow.status import fingerprint

    from vllm_hotfix.flow.status import survey

    statuses = survey(hotfix_ids=hotfix_ids, python=python, root=root, catalogs=catalogs, with_catalog=True)
    named = bool(hotfix_ids)
    counted = [s for s in statuses if named or s.recorded]  # these decide the exit code, and the fingerprint
    code = int(NotInEffect.exit_code) if any(s.state not in IN_EFFECT for s in counted) else 0
    digest = fingerprint(counted)
    if as_json:
        emit_json([dict(s.to_json(), fingerprint=digest) for s in statuses])
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
        if s.advice and s.state not in IN_EFFECT:
            say(f"     to do: {s.advice}")
    if counted:
        say(f"fingerprint: {digest}")
    return code

"""`hotfix status`: one state per hotfix and target, decided from the files themselves."""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix.output import emit_json, say

MARKS = {"applied": "ok", "fixed-upstream": "ok", "not-applied": "--", "not-applicable": "--"}


def survey(options: dict, *, with_catalog: bool) -> list:
    """Statuses of the named hotfixes, or of every recorded one (+ matching catalog ones)."""
    from vllm_hotfix.flow import operations as ops
    from vllm_hotfix.catalog.index import Catalog, parse_ref

    root = Path(options["root"]) if options.get("root") else None
    surveyor = ops.Survey(options.get("python"), root, Catalog.load(options.get("catalogs") or ()))
    ids = tuple(options.get("hotfix_ids") or ())
    if ids:
        return surveyor.named(parse_ref(i) for i in ids)
    return surveyor.everything(with_catalog=with_catalog)


def run(**options) -> int:
    """Exit 1 when a named or recorded hotfix is not in effect (catalog extras only inform)."""
    from vllm_hotfix.errors import NotInEffect
    from vllm_hotfix.flow.operations import IN_EFFECT

    statuses = survey(options, with_catalog=True)
    named = bool(options.get("hotfix_ids"))
    code = int(NotInEffect.exit_code) if any(
        s.state not in IN_EFFECT and (named or s.recorded) for s in statuses) else 0
    if options.get("as_json"):
        emit_json([s.to_json() for s in statuses])
        return code
    if not statuses:
        say("no hotfix recorded, and no catalog hotfix targets a package of this interpreter")
        return 0
    width = max(len(s.id) for s in statuses)
    for s in statuses:
        version = f"@{s.version}" if s.version is not None else ""
        say(f"{MARKS.get(s.state, '!!')} {s.id:<{width}} {s.state:<14} {version} {s.target}".rstrip())
        if s.detail:
            say(f"     {s.detail}")
        if s.advice and s.state not in IN_EFFECT:
            say(f"     to do: {s.advice}")
    return code

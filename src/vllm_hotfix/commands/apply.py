"""`hotfix apply`: a catalog hotfix (ID), an ad-hoc diff on an installed package (--patch --python
--package) or a raw diff on a directory (--patch --root). Every kind is recorded (status/verify/rollback).

`apply A B C` (``apply_series``): several catalog hotfixes on one target, in that order, all-or-nothing in ONE
transaction (flow/apply_group). Every ID is resolved and checked first (unknown, advisory, not for the target,
another target: refused before anything is written, with the exit code `apply ID` gives); an ID named twice
is a usage error (exit 2). A member already applied is what `apply ID` makes of it (nothing to do, adopted,
resealed), the others go on top, in the order given. --json: a list of `apply ID --json` documents."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix_guard.core.hunk_apply import FileEdit, Plan
from vllm_hotfix_guard.core.diff import DiffStat
from vllm_hotfix_guard.errors import UsageError
from vllm_hotfix_guard.output import emit_json, note, quote_path, say, say_lines

LETTERS = {"modify": "M", "create": "A", "delete": "D", "rename": "R", "mode": "M"}


def run(*, hotfix_ids: Sequence[str], patch_file: Path | None, root: Path | None, python: str | None,
        package: str | None, adhoc_id: str | None, strip: int | None, patch_files: Sequence[Path],
        upstream_repo: Path | None, checkouts: Sequence[str], reverse: bool, dry_run: bool,
        catalogs: Sequence[Path], as_json: bool) -> int:
    if patch_file is not None and hotfix_ids:
        raise UsageError("give either a hotfix ID or --patch FILE, not both",
                         hint="a manifest's separately distributed file goes with --patch-file")
    hotfix_id = hotfix_ids[0] if hotfix_ids else None
    if patch_file is not None and root is not None:  # strip None: git's default and its -p guess
        return apply_raw(patch_file, root, strip=strip, reverse=reverse, dry_run=dry_run, hotfix_id=adhoc_id,
                         as_json=as_json)
    strip = 1 if strip is None else strip
    origin = None  # the catalog directory a catalog hotfix comes from
    if reverse:
        raise UsageError("--reverse is for a raw --patch with --root; to undo a hotfix use `hotfix rollback ID`")
    if len(hotfix_ids) > 1:
        return apply_series(hotfix_ids, root=root, python=python, patch_files=patch_files, upstream_repo=upstream_repo,
                            checkouts=checkouts, dry_run=dry_run, catalogs=catalogs, as_json=as_json)
    from vllm_hotfix.flow.apply_hotfix import apply_hotfix
    from vllm_hotfix.flow.resolve import Resolver, warn

    from vllm_hotfix.catalog.index import Catalog

    resolver = Resolver(python, root)
    catalog = Catalog.load(catalogs)  # what the recorded hotfixes are judged by, as `hotfix status` does
    if patch_file is not None:
        from vllm_hotfix.flow.hotfix import adhoc_hotfix

        if not package:
            raise UsageError("--patch with --python needs --package NAME (the import name, e.g. vllm)")
        hotfix = adhoc_hotfix(patch_file, hotfix_id=adhoc_id, strip=strip, package=package)
        target, spec = resolver.package(package), None
    else:
        if not hotfix_id:
            raise UsageError("name a hotfix (`hotfix list` shows them) or give --patch FILE")
        hotfix, target, spec, origin = _catalog_member(hotfix_id, resolver, catalog, checkouts=checkouts,
                                                      patch_files=patch_files, upstream_repo=upstream_repo)
    warn(target)
    outcome = apply_hotfix(hotfix, target, spec, dry_run=dry_run, catalog=catalog, catalog_dir=_catalog_dir(origin))
    _report_hotfix(outcome, origin, as_json=as_json)
    return 0


def _catalog_member(hotfix_id: str, resolver, catalog, *, checkouts: Sequence[str], patch_files: Sequence[Path],
                   upstream_repo: Path | None) -> tuple:
    """(hotfix, target, spec, origin) of ``ID`` / ``ID@VERSION``, checked to apply there: an unknown id, an
    advisory, a target outside its range and a missing required checkout refuse here, before anything is written."""
    from vllm_hotfix.catalog.index import parse_ref
    from vllm_hotfix.flow.applicability import check_applicable, check_requires, parse_checkouts
    from vllm_hotfix.flow.hotfix import catalog_hotfix

    ref_id, version = parse_ref(hotfix_id)
    manifest = catalog.get(ref_id, version)
    origin = catalog.origin(manifest)
    if manifest.kind == "advisory":
        manifest.patches_for(None)  # refuses (exit 3, "is an advisory"), before any target is resolved
    target, spec = resolver.for_manifest(manifest)
    check_applicable(manifest, spec, target, catalog)
    check_requires(manifest, parse_checkouts(checkouts))
    hotfix = catalog_hotfix(manifest, target, patch_files=patch_files, upstream_repo=upstream_repo)
    return hotfix, target, spec, origin


def _catalog_dir(origin) -> str | None:
    """The catalog directory a record keeps (None: the built-in catalog, or not a catalog hotfix)."""
    return str(origin.path.absolute()) if origin is not None and not origin.builtin else None


def apply_series(hotfix_ids: Sequence[str], *, root: Path | None, python: str | None, patch_files: Sequence[Path],
                 upstream_repo: Path | None, checkouts: Sequence[str], dry_run: bool, catalogs: Sequence[Path],
                 as_json: bool) -> int:
    """`apply A B C`: every ID resolved and checked, then flow/apply_group's one transaction (module doc)."""
    from vllm_hotfix.catalog.index import Catalog, parse_ref
    from vllm_hotfix.flow.apply_group import Member, apply_group
    from vllm_hotfix.flow.resolve import Resolver, warn

    seen: dict[str, str] = {}
    for given in hotfix_ids:
        hotfix_id = parse_ref(given)[0]
        if hotfix_id in seen:
            raise UsageError(f"{hotfix_id} is named twice ({seen[hotfix_id]}, {given})",
                             hint="name each hotfix once, in the order to apply them")
        seen[hotfix_id] = given
    resolver = Resolver(python, root)
    catalog = Catalog.load(catalogs)  # what the recorded hotfixes are judged by, as `hotfix status` does
    members, origins, target = [], [], None
    for given in hotfix_ids:  # every one resolved and checked before anything is written
        hotfix, found, spec, origin = _catalog_member(given, resolver, catalog, checkouts=checkouts,
                                                     patch_files=patch_files, upstream_repo=upstream_repo)
        if target is not None and Path(found.root).resolve() != Path(target.root).resolve():
            raise UsageError(f"{members[0].hotfix.id} is for {_where(target)} and {hotfix.id} for "
                             f"{_where(found)}: one apply writes one target",
                             hint="apply the hotfixes of each target in a command of its own")
        target = target or found
        members.append(Member(hotfix, found, spec, _catalog_dir(origin)))
        origins.append(origin)
    warn(target)
    outcomes = apply_group(members, dry_run=dry_run, catalog=catalog)
    if as_json:
        emit_json([_hotfix_json(outcome, origin) for outcome, origin in zip(outcomes, origins)])
        return 0
    for outcome, origin in zip(outcomes, origins):
        _report_hotfix(outcome, origin, as_json=False, in_group=True)
    _summary(outcomes, target, dry_run=dry_run, catalog=catalog, where=_where(target))
    return 0


def _summary(outcomes, target, *, dry_run: bool, catalog, where: str) -> None:
    """The group's last line: what was (or would be) applied, in one transaction, and the check to run."""
    from vllm_hotfix.flow.resolve import target_option

    changed = [o for o in outcomes if not o.proposal.already or o.adopted]
    if not changed:
        say(f"nothing to do: every one of {', '.join(o.proposal.hotfix.ref for o in outcomes)} is in effect on {where}")
        return
    refs = ", ".join(o.proposal.hotfix.ref for o in changed)
    files = {e.path for o in changed if not o.proposal.already for e in o.proposal.plan.edits}
    if dry_run:
        say(f"dry run: would apply {refs} to {where}, in this order, in one transaction: {len(files)} file(s); "
            "nothing was written")
        return
    ids = " ".join(o.proposal.hotfix.id for o in outcomes)
    say(f"applied {refs} to {where}, in this order, all-or-nothing in one transaction: {len(files)} file(s); "
        f"check with `hotfix verify {ids} {target_option(target, catalog)}`")


def _hotfix_json(outcome, origin) -> dict:
    """The --json document of one catalog hotfix's apply (`apply A B` prints a list of them)."""
    from vllm_hotfix.flow.resolve import target_summary

    proposal = outcome.proposal
    hotfix, target = proposal.hotfix, proposal.target
    edits = () if proposal.already else proposal.plan.edits
    return {
        "id": hotfix.id, "version": hotfix.version, "source": hotfix.source,
        "target": target_summary(target),
        "applied": not outcome.dry_run and not proposal.already,
        "dry_run": outcome.dry_run, "already_applied": proposal.already, "adopted": outcome.adopted,
        "sealed": outcome.sealed,
        "superseded": proposal.superseded.version if proposal.superseded else None,
        "contained_in": list(proposal.contained_in), "dropped": list(proposal.dropped),
        "catalog": origin.to_json() if origin is not None else None,
        "patches": [{"patch": p.label, "versions": p.versions, "sha256": p.sha256} for p in _picked(hotfix, target)],
        "files": [_edit_json(e) for e in edits],
        "stale_bytecode": [{"source": source, "pyc": pyc, "why": why, "removed": not outcome.dry_run}
                           for source, pyc, why in proposal.bytecode],
    }


def _report_hotfix(outcome, origin, *, as_json: bool, in_group: bool = False) -> None:
    """What one catalog hotfix's apply did; ``in_group``: a member of `apply A B` (its summary is the group's)."""
    from vllm_hotfix.flow.resolve import target_option

    proposal = outcome.proposal
    hotfix, target = proposal.hotfix, proposal.target
    edits = () if proposal.already else proposal.plan.edits
    if as_json:
        emit_json(_hotfix_json(outcome, origin))
        return
    if origin is not None and hotfix.manifest is not None:
        say(f"{hotfix.ref} from {origin.describe()} ({hotfix.manifest.source})")
    where = _where(target)
    if proposal.contained_in:
        say(f"already in effect as part of what the recorded series ({', '.join(proposal.contained_in)}) put in "
            f"{where}: {hotfix.ref} makes the same change; nothing to do, and it is not recorded itself")
        return
    if outcome.adopted:
        verb = "would record" if outcome.dry_run else "recorded"
        say(f"adopted: the files of {where} already hold {hotfix.ref}'s change; {verb} it for this "
            f"{'commit' if target.commit else 'release'}, no file changed")
        return
    if proposal.already and proposal.bytecode:
        verb = "would remove" if outcome.dry_run else "removed"
        say(f"already applied: {hotfix.ref} on {where}; {verb} the stale bytecode Python would have loaded "
            f"instead: {', '.join(quote_path(pyc) for _, pyc, _ in proposal.bytecode)}")
        return
    if outcome.sealed:
        say(f"already applied: {hotfix.ref} on {where}; {'would seal' if outcome.dry_run else 'sealed'} its record "
            f"(written before records carried seals: the guard now checks the seal instead of re-deriving it)")
        return
    if proposal.already:
        say(f"already applied: {hotfix.ref} on {where}; nothing to do")
        return
    if proposal.dropped:
        note(f"the record was made on another release: {', '.join(proposal.dropped)} are not in effect on "
             f"{target.version} and are dropped from it; apply them again for this release")
    if hotfix.manifest is not None:  # which of the manifest's diffs (one per release range) goes on
        say(_picked_line(hotfix, target))
    if proposal.superseded is not None:
        say(f"upgrade: {hotfix.id}@{proposal.superseded.version} is reversed and {hotfix.ref} applied, in one transaction")
    for edit in edits:
        say(_describe(edit))
    if in_group:
        say(f"{'would apply' if outcome.dry_run else 'applied'} {hotfix.ref}: {len(edits)} file(s)")
    elif outcome.dry_run:
        say(f"dry run: would apply {hotfix.ref} to {where}: {len(edits)} file(s); nothing was written")
    else:
        say(f"applied {hotfix.ref} to {where}: {len(edits)} file(s), all-or-nothing; "
            f"check with `hotfix verify {hotfix.id} {target_option(target)}`")


def _where(target) -> str:
    """'vllm 0.30.0 at /srv/venv/lib/python3.12/site-packages': the target a report names."""
    return f"{target.distribution or target.package} {target.version or ''} at {target.root}".replace("  ", " ")


def _picked(hotfix, target) -> tuple:
    """The manifest patches chosen for the target's version (a hotfix may carry one diff per release range)."""
    manifest = hotfix.manifest
    return manifest.patches_for(target.version) if manifest is not None else ()


def _picked_line(hotfix, target) -> str:
    """'patch: ID/0.27.patch (vllm >=0.27.0,<0.32.0, picked for 0.30.0 out of 0.25.patch, ...)', or the ad-hoc diff."""
    picked = _picked(hotfix, target)
    choices = hotfix.manifest.patches
    name = target.distribution or target.package
    out_of = (f", picked for {target.version} out of {', '.join(p.label.rsplit('/', 1)[-1] for p in choices)}"
              if sum(1 for p in choices if p.versions) > 1 else "")
    parts = [p.label + (f" ({name} {p.versions}{out_of})" if p.versions else "") for p in picked]
    return f"patch{'es' if len(picked) > 1 else ''}: {', '.join(parts)}"


def apply_raw(patch_file: Path, root: Path, *, strip: int | None, reverse: bool, dry_run: bool, hotfix_id: str | None,
              as_json: bool) -> int:
    from vllm_hotfix.flow.apply_hotfix import apply_raw as flow_apply_raw, progress_reader

    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"--root {root}: no such directory")
    outcome = flow_apply_raw(patch_file, root, strip=strip, reverse=reverse, dry_run=dry_run, hotfix_id=hotfix_id,
                             progress=progress_reader)
    for warning in outcome.warnings:
        note(warning)
    _report(outcome.plan, outcome.source, outcome.stats, dry_run=dry_run, already=outcome.already, as_json=as_json,
            hotfix_id=outcome.hotfix_id, root=root, recorded=outcome.recorded, reverse=reverse)
    return 0


def _offsets(edit: FileEdit) -> list[int]:
    return [p.offset for p in edit.placements]


def _describe(edit: FileEdit) -> str:
    name = quote_path(edit.path)
    if edit.action == "rename":
        name = f"{quote_path(edit.old_path)} -> {name}"
    hunks = len(edit.placements)
    details = [f"{hunks} hunk{'s' if hunks != 1 else ''}"] if hunks else []
    if edit.new_mode is not None and edit.old_mode is not None and edit.old_mode & 0o777 != edit.new_mode:
        details.append(f"mode {edit.old_mode & 0o777:o} -> {edit.new_mode:o}")
    for placement in edit.placements:
        if placement.offset:
            at = placement.header.split(" @@")[0] + " @@"
            details.append(f"offset {placement.offset:+d} at {at}")
    return f"{LETTERS.get(edit.action, '?')} {name}" + (f" ({', '.join(details)})" if details else "")


def _edit_json(edit: FileEdit) -> dict:
    return {"path": edit.path, "action": edit.action, "old_path": edit.old_path,
            "hunks": len(edit.placements), "offsets": _offsets(edit)}


def _report(plan: Plan, source: str, stats: DiffStat, *, dry_run: bool, already: bool, as_json: bool,
            hotfix_id: str, root: Path, recorded: bool, reverse: bool) -> None:
    if as_json:
        emit_json({
            "id": hotfix_id,
            "applied": not dry_run and not already,
            "dry_run": dry_run,
            "already_applied": already,
            "recorded": not reverse and not dry_run,  # recorded under "id" (status / verify / rollback see it)
            "files": [] if already else [_edit_json(e) for e in plan.edits],
        })
        return
    if already and plan.reverse and recorded and not reverse:
        say(f"adopted: the tree already holds {source} (its reverse applies cleanly); "
            f"{'would record' if dry_run else 'recorded'} it as {hotfix_id}, no file changed")
        return
    if already and plan.reverse:
        say(f"already applied: {source} (its reverse applies cleanly); nothing to do")
        return
    if already:
        say(f"already reversed: {source} is not in the tree (it applies forward cleanly); nothing to do")
        return
    lines = [_describe(edit) for edit in plan.edits]
    summary = f"{len(plan.edits)} file(s), +{stats.insertions} -{stats.deletions}"
    if plan.reverse:
        summary += ", reversed"
    if dry_run:
        lines.append(f"dry run: would change {summary}; nothing was written")
    else:
        lines.append(f"applied {summary} (all-or-nothing)")
        if recorded and not reverse:
            lines.append(f"recorded as {hotfix_id}: `hotfix status --root {root}` / `hotfix rollback {hotfix_id} --root {root}`")
        elif recorded:
            lines.append(f"record of {hotfix_id} removed")
    say_lines(lines)

"""`hotfix rollback ID --to-version V`: the recorded version of a catalog hotfix replaced by version V of the
catalog, files and record in one transaction -- the way back from an upgrade (v5 -> v6, then back to v5).

A plain `hotfix rollback ID` takes the hotfix out (the files go back to their baseline: `audit` clean);
this one is the apply of ``ID@V`` over the recorded version (flow/plan.propose with ``back_to``: the recorded
patch reversed, V's applied, the baseline proven, post-checked, undone on failure), whichever of the two
supersedes the other. The history line says ``rolled-back``, ``back to ID@V``.
"""

from __future__ import annotations

from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.output import emit_json, quote_path, say


def back_to(survey, hotfix_id: str, version: str, *, dry_run: bool, as_json: bool) -> int:
    from vllm_hotfix.flow.applicability import check_applicable
    from vllm_hotfix.flow.apply_hotfix import apply_hotfix
    from vllm_hotfix.flow.hotfix import catalog_hotfix
    from vllm_hotfix.flow.resolve import target_option

    manifest = survey.catalog.get(hotfix_id, version)  # exit 3: an unknown id or version (the known ones named)
    if manifest.kind == "advisory":
        manifest.patches_for(None)  # refuses (exit 3, "is an advisory")
    try:
        target, state = survey.holding(hotfix_id)
    except Refused as not_recorded:
        target, _ = survey.resolver.for_manifest(manifest)
        raise Refused(not_recorded.message, hint=f"nothing to go back from: `hotfix apply {manifest.ref} "
                                                 f"{target_option(target, survey.catalog)}` applies that version") from None
    recorded = state.hotfixes[hotfix_id]
    if recorded.source != "catalog":
        raise Refused(f"{hotfix_id}: recorded from a diff (--patch), not from the catalog: no version to go back to",
                      hint=f"`hotfix rollback {hotfix_id} {target_option(target, survey.catalog)}` takes it out")
    spec = manifest.spec_for(target)
    check_applicable(manifest, spec, target, survey.catalog)
    hotfix = catalog_hotfix(manifest, target)
    origin = survey.catalog.origin(manifest)
    catalog_dir = str(origin.path.absolute()) if origin is not None and not origin.builtin else None
    outcome = apply_hotfix(hotfix, target, spec, dry_run=dry_run, catalog=survey.catalog, catalog_dir=catalog_dir,
                           back_to=True)
    proposal = outcome.proposal
    edits = () if proposal.already else proposal.plan.edits
    if as_json:
        emit_json({"id": hotfix_id, "version": recorded.version, "to_version": manifest.version,
                   "target": str(target.root), "dry_run": dry_run, "method": "to-version",
                   "nothing_to_do": proposal.already,
                   "files": [{"path": e.path, "action": e.action} for e in edits]})
        return 0
    if proposal.already:
        say(f"nothing to roll back: {manifest.ref} is what is recorded in {target.root}")
        return 0
    for edit in edits:
        say(f"{'restore' if edit.action != 'delete' else 'remove '} {quote_path(edit.path)}")
    went = f"{hotfix_id}@{recorded.version} to {manifest.ref} in {target.root}: {len(edits)} file(s)"
    if dry_run:
        say(f"dry run: would roll back {went}, in one transaction; nothing was written")
    else:
        say(f"rolled back {went}, files and record in one transaction; check with "
            f"`hotfix verify {hotfix_id} {target_option(target, survey.catalog)}`")
    return 0

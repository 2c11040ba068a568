"""`hotfix rollback ID`: put back, byte for byte, the files a recorded hotfix changed."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix.catalog.index import Catalog, parse_ref
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.output import emit_json, quote_path, say


def run(*, hotfix_id: str, python: str | None, root: Path | None, dry_run: bool, catalogs: Sequence[Path],
        as_json: bool) -> int:
    from vllm_hotfix.flow.rollback_change import rollback
    from vllm_hotfix.flow.survey import Survey

    hotfix_id, _ = parse_ref(hotfix_id)
    survey = Survey(python, Path(root) if root is not None else None, Catalog.load(catalogs))
    try:
        target, _state = survey.holding(hotfix_id)
    except Refused as not_recorded:
        return _nothing_to_roll_back(survey, hotfix_id, not_recorded, dry_run, as_json)
    target_root = Path(target.root)
    outcome = rollback(hotfix_id, target_root, dry_run=dry_run, target=target)
    recorded = outcome.recorded
    if as_json:
        emit_json({
            "id": hotfix_id, "version": recorded.version, "target": str(target_root),
            "dry_run": outcome.dry_run, "method": outcome.method, "rebased": list(outcome.rebased),
            "files": [{"path": e.path, "action": e.action} for e in outcome.plan.edits],
            "forgotten": outcome.method == "forget", "release_change": outcome.release_change,
        })
        return 0
    if outcome.method == "forget":
        if outcome.dry_run:
            say(f"dry run: would forget the record of {hotfix_id}@{recorded.version} in {target_root} "
                f"({outcome.release_change}); nothing was written")
        else:
            say(f"forgot the record of {hotfix_id}@{recorded.version} in {target_root}: {outcome.release_change}; "
                f"no file was written (its backups are that release's files)")
        return 0
    for edit in outcome.plan.edits:
        say(f"{'restore' if edit.action != 'delete' else 'remove '} {quote_path(edit.path)}")
    how = {"backups": "from the recorded backups", "reverse": "by reverse-applying the recorded patch",
           "in-place": "by reversing its hunks under " + ", ".join(outcome.rebased),
           "none": "(every file was already at its baseline)"}[outcome.method]
    if outcome.rebased:
        say(f"{', '.join(outcome.rebased)} stay{'s' if len(outcome.rebased) == 1 else ''} applied: "
            f"{'its record was' if len(outcome.rebased) == 1 else 'their records were'} re-derived without {hotfix_id}")
    if outcome.dry_run:
        say(f"dry run: would roll back {hotfix_id}@{recorded.version} in {target_root} {how}; nothing was written")
    else:
        say(f"rolled back {hotfix_id}@{recorded.version} in {target_root} {how}; record removed")
    return 0


def _nothing_to_roll_back(survey, hotfix_id: str, not_recorded: Refused, dry_run: bool, as_json: bool) -> int:
    """Not recorded: exit 0 when its files are at their baseline (rollback is idempotent), else refuse
    with the status's own words (applied by hand, drifted, ...)."""
    if hotfix_id not in survey.catalog.ids():
        raise not_recorded
    (found,) = survey.named([(hotfix_id, None)])
    if found.state != "not-applied":
        raise Refused(f"{hotfix_id}: not recorded as applied to {found.target}, and its files are {found.state}"
                      + (f" ({found.detail})" if found.detail else ""),
                      hint=found.advice or "`hotfix status` shows what is applied where")
    if as_json:
        emit_json({"id": hotfix_id, "version": None, "target": found.target, "dry_run": dry_run, "method": "none",
                   "files": [], "nothing_to_do": True})
        return 0
    say(f"nothing to roll back: {hotfix_id} is not applied to {found.target} (its files are at their baseline)")
    return 0

"""`hotfix rollback ID`: put back, byte for byte, the files a recorded hotfix changed."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix.catalog.index import Catalog, parse_ref
from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.output import emit_json, note, quote_path, say


def run(*, hotfix_id: str, python: str | None, root: Path | None, dry_run: bool, catalogs: Sequence[Path],
        as_json: bool, to_version: str | None = None) -> int:
    from vllm_hotfix.flow.rollback_change import rollback
    from vllm_hotfix.flow.survey import Survey

    hotfix_id, _ = parse_ref(hotfix_id)
    survey = Survey(python, Path(root) if root is not None else None, Catalog.load(catalogs))
    if to_version is not None:
        from vllm_hotfix.commands.rollback_to import back_to

        return back_to(survey, hotfix_id, to_version, dry_run=dry_run, as_json=as_json)
    try:
        target, state = survey.holding(hotfix_id)
    except Refused as not_recorded:
        return _nothing_to_roll_back(survey, hotfix_id, not_recorded, dry_run, as_json)
    target_root = Path(target.root)
    earlier = _upgraded_from(survey, target, hotfix_id, state.hotfixes[hotfix_id].version)  # read before the change
    outcome = rollback(hotfix_id, target_root, dry_run=dry_run, target=target)
    recorded = outcome.recorded
    if as_json:
        emit_json({
            "id": hotfix_id, "version": recorded.version, "target": str(target_root),
            "dry_run": outcome.dry_run, "method": outcome.method, "rebased": list(outcome.rebased),
            "files": [{"path": e.path, "action": e.action} for e in outcome.plan.edits],
            "forgotten": outcome.method == "forget", "release_change": outcome.release_change,
            "upgraded_from": earlier,
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
    if earlier is not None:  # rollback takes the hotfix out (the baseline); the way back to the version before it
        from vllm_hotfix.flow.resolve import target_option

        option = target_option(target, survey.catalog)
        if outcome.dry_run:
            say(f"{hotfix_id}@{recorded.version} was an upgrade from {hotfix_id}@{earlier}: rollback returns the files to "
                f"their baseline; `hotfix rollback {hotfix_id} --to-version {earlier} {option}` returns to "
                f"{hotfix_id}@{earlier} instead, in one transaction")
        else:
            say(f"{hotfix_id}@{recorded.version} was an upgrade from {hotfix_id}@{earlier}; to have that version "
                f"again: `hotfix apply {hotfix_id}@{earlier} {option}`")
    return 0


def _upgraded_from(survey, target, hotfix_id: str, version) -> str | None:
    """The version the recorded one was upgraded from (its history line, flow/history_line.upgraded_from),
    when the catalog still has it: the printed way back must run as pasted."""
    from vllm_hotfix.flow.history_line import upgraded_from
    from vllm_hotfix.txn.history import read_history
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.paths import TargetDir

    try:
        earlier = upgraded_from(read_history(TargetDir.of(target.root)), hotfix_id, version)
    except HotfixError:  # a history line that does not read: no way to offer
        return None
    try:
        if earlier is not None:
            survey.catalog.get(hotfix_id, earlier)
    except HotfixError:
        note(f"{hotfix_id}@{version} was an upgrade from {hotfix_id}@{earlier}, which the catalog no longer has: "
             f"add its manifest (--catalog DIR) to go back to it")
        return None
    return earlier


def _nothing_to_roll_back(survey, hotfix_id: str, not_recorded: Refused, dry_run: bool, as_json: bool) -> int:
    """Not recorded: exit 0 when its files are at their baseline (rollback is idempotent), else refuse
    with the status's own words (applied by hand, drifted, ...)."""
    if hotfix_id not in survey.catalog.ids():
        raise not_recorded
    (found,) = survey.named([(hotfix_id, None)])
    if found.state != "not-applied":
        raise Refused(f"{hotfix_id}: not recorded as applied to {found.target}, and its files are {found.state}"
                      + (f" ({found.detail})" if found.detail else ""),
                      hint=found.advice or "`hotfix status --all` shows what is applied where")
    if as_json:
        emit_json({"id": hotfix_id, "version": None, "target": found.target, "dry_run": dry_run, "method": "none",
                   "files": [], "nothing_to_do": True})
        return 0
    say(f"nothing to roll back: {hotfix_id} is not applied to {found.target} (its files are at their baseline)")
    return 0

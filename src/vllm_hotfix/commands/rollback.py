"""`hotfix rollback ID`: put back, byte for byte, the files a recorded hotfix changed."""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix.catalog.index import parse_ref
from vllm_hotfix.output import emit_json, say


def run(**options) -> int:
    from vllm_hotfix.flow import operations as ops

    hotfix_id, _ = parse_ref(options["hotfix_id"])
    root = Path(options["root"]) if options.get("root") else None
    state, target_root = ops.find_recorded(hotfix_id, python=options.get("python"), root=root)
    outcome = ops.rollback(state, hotfix_id, target_root, dry_run=bool(options.get("dry_run")))
    recorded = outcome.recorded
    if options.get("as_json"):
        emit_json({
            "id": hotfix_id, "version": recorded.version, "target": str(target_root),
            "dry_run": outcome.dry_run, "method": outcome.method,
            "files": [{"path": e.path, "action": e.action} for e in outcome.plan.edits],
        })
        return 0
    for edit in outcome.plan.edits:
        say(f"{'restore' if edit.action != 'delete' else 'remove '} {edit.path}")
    how = {"backups": "from the recorded backups", "reverse": "by reverse-applying the recorded patch",
           "none": "(every file was already at its baseline)"}[outcome.method]
    if outcome.dry_run:
        say(f"dry run: would roll back {hotfix_id}@{recorded.version} in {target_root} {how}; nothing was written")
    else:
        say(f"rolled back {hotfix_id}@{recorded.version} in {target_root} {how}; record removed")
    return 0

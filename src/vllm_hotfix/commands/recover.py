"""`hotfix recover`: undo an apply that was interrupted (kill -9, power loss) from its journal."""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix import paths
from vllm_hotfix.errors import UsageError
from vllm_hotfix.output import emit_json, say
from vllm_hotfix.txn.journal import RecoveryReport, recover
from vllm_hotfix.txn.lock import target_lock


def run(**options) -> int:
    root = options.get("root")
    if root is None:
        return _recover_python(options.get("python"), bool(options.get("as_json")))
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"--root {root}: no such directory")
    state_dir = paths.target_state_dir(root)
    with target_lock(state_dir):
        report = recover(paths.journal_dir(state_dir))
    if options.get("as_json"):
        emit_json({
            "recovered": report is not None,
            "restored": list(report.restored) if report else [],
            "removed": list(report.removed) if report else [],
        })
    elif report is None:
        say(f"nothing to recover for {root}")
    else:
        _say_recovered(report)
    return 0


def _say_recovered(report: RecoveryReport) -> None:
    say(f"recovered an interrupted apply on {report.root}: every file is back to its state before that apply")
    for rel in report.restored:
        say(f"  restored {rel}")
    for rel in report.removed:
        say(f"  removed  {rel} (created by the interrupted apply)")


def _recover_python(python: str | None, as_json: bool) -> int:
    """Every target of this interpreter (its sys.path directories) with an interrupted apply."""
    from vllm_hotfix.flow.operations import python_roots

    recovered = []
    for root in python_roots(python):
        state_dir = paths.target_state_dir(root)
        if not paths.journal_dir(state_dir).is_dir():
            continue
        with target_lock(state_dir):
            report = recover(paths.journal_dir(state_dir))
        if report is not None:
            recovered.append(report)
    if as_json:
        emit_json({
            "recovered": bool(recovered),
            "restored": [str(r.root / rel) for r in recovered for rel in r.restored],
            "removed": [str(r.root / rel) for r in recovered for rel in r.removed],
        })
    elif not recovered:
        say(f"nothing to recover for python {python or 'this interpreter'}")
    for report in [] if as_json else recovered:
        _say_recovered(report)
    return 0

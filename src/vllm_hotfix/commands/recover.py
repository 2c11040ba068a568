"""`hotfix recover`: undo an apply or rollback that was interrupted (kill -9, power loss) from its journal.

Files AND record go back to their state before that transaction (the record is part of it)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix_guard.errors import UsageError
from vllm_hotfix_guard.output import emit_json, quote_path, say
from vllm_hotfix.txn.recovery import RecoveryReport


def run(*, python: str | None, root: Path | None, catalogs: Sequence[Path], dry_run: bool, as_json: bool) -> int:
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.flow.resolve import Resolver
    from vllm_hotfix.flow.transaction import recover_target
    from vllm_hotfix_guard.paths import TargetDir

    if root is not None and not Path(root).is_dir():
        raise UsageError(f"--root {root}: no such directory")
    targets = Resolver(python, root).targets(Catalog.load(catalogs))
    pending = [t for t in targets if TargetDir.of(t.root).pending()]
    recovered: list[RecoveryReport] = []
    if not dry_run:
        for target in targets:
            report = recover_target(Path(target.root))
            if report is not None:
                recovered.append(report)
    what = f"--root {root}" if root is not None else f"python {python or 'this interpreter'}"
    if as_json:
        emit_json({
            "dry_run": dry_run,
            "pending": [str(t.root) for t in pending],
            "recovered": bool(recovered),
            "restored": [str(r.root / rel) for r in recovered for rel in r.restored],
            "removed": [str(r.root / rel) for r in recovered for rel in r.removed],
            "temp_files": [str(r.root / rel) for r in recovered for rel in r.temps],
        })
        return 0
    if dry_run:
        for target in pending:
            say(f"would recover an interrupted apply on {target.root}")
        if not pending:
            say(f"nothing to recover for {what}")
        return 0
    if not recovered:
        say(f"nothing to recover for {what}")
    for report in recovered:
        _say_recovered(report)
    return 0


def _say_recovered(report: RecoveryReport) -> None:
    if report.restored or report.removed or not report.temps:
        say(f"recovered an interrupted apply on {report.root}: every file and the record are back to their "
            f"state before that apply")
    for rel in report.temps:
        say(f"  removed  {quote_path(rel)} (a temp file an interrupted transaction left)")
    for rel in report.restored:
        say(f"  restored {quote_path(rel)}")
    for rel in report.removed:
        say(f"  removed  {quote_path(rel)} (created by the interrupted apply)")

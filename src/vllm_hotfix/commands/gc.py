"""`hotfix gc`: list and remove the state of targets that no longer exist (``--dry-run``: list only)."""

from __future__ import annotations

from vllm_hotfix.errors import Busy
from vllm_hotfix.output import emit_json, note, say
from vllm_hotfix.paths import state_dir


def run(*, dry_run: bool, as_json: bool) -> int:
    from vllm_hotfix.flow.gc import remove, stale_targets

    stale = stale_targets()
    if not dry_run:
        busy = []
        for entry in stale:
            try:
                remove(entry)
            except Busy:  # a transaction is starting on it right now: not stale after all
                busy.append(entry)
                note(f"skipped {entry.directory}: a hotfix command holds its lock")
        stale = [entry for entry in stale if entry not in busy]
    if as_json:
        emit_json({"state_dir": str(state_dir()), "dry_run": dry_run, "removed": [] if dry_run else [
            str(s.directory) for s in stale], "stale": [
            {"directory": str(s.directory), "target": s.root, "hotfixes": list(s.hotfixes), "pending": s.pending}
            for s in stale]})
        return 0
    verb = "would remove" if dry_run else "removed"
    for entry in stale:
        what = f"state of {entry.root} (gone)" if entry.root else "empty state (nothing recorded, no target named)"
        recorded = f"; recorded: {', '.join(entry.hotfixes)}" if entry.hotfixes else ""
        pending = "; an interrupted apply was pending" if entry.pending else ""
        say(f"{verb} {entry.directory}: {what}{recorded}{pending}")
    if not stale:
        say(f"nothing to clean in {state_dir()}: every target with state still exists")
    elif dry_run:
        say(f"dry run: {len(stale)} stale target(s); nothing was removed")
    return 0

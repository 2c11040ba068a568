"""`hotfix gc`: remove the state of targets gone for good; keep what is only missing for a while.

``--dry-run`` lists what would be removed and what is kept, and why, and writes nothing (not even
the "first seen missing" marker: the clock starts with the first real run).
"""

from __future__ import annotations

import re
import time
from typing import Sequence

from vllm_hotfix_guard.errors import Busy, Refused, UsageError
from vllm_hotfix_guard.output import emit_json, note, say
from vllm_hotfix_guard.paths import state_dir

UNITS = {"": 86400, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """'7d', '12h', '30m', '90s', '2w', '0' (a bare number counts days) -> seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text or "")
    if found is None:
        raise UsageError(f"--older-than {text!r}: expected a number and a unit, e.g. 7d, 12h, 30m, 0",
                         hint="units: s, m, h, d (default), w")
    return float(found.group(1)) * UNITS[found.group(2)]


def run(*, dry_run: bool, as_json: bool, older_than: str = "7d", confirm: Sequence[str] = ()) -> int:
    import os

    from vllm_hotfix.flow import gone_targets

    limit = parse_age(older_than)
    for path in confirm:
        if os.path.isdir(path):
            raise Refused(f"--confirm {path}: it exists; gc never removes the state of a target that exists",
                          hint="roll its hotfixes back (`hotfix rollback ID --root/--python ...`) to take them out")
    now = time.time()
    entries = gone_targets.survey(older_than=limit, confirmed=confirm, now=now)
    unknown = gone_targets.unconfirmed(confirm, entries)
    if unknown:
        gone = [e.root for e in entries if e.state == gone_targets.GONE]
        raise Refused(f"--confirm {unknown[0]}: no recorded target at that path is missing; nothing was removed",
                      hint=("missing targets: " + ", ".join(map(str, gone))) if gone else
                      "`hotfix gc --dry-run` lists the recorded targets")
    removed, busy = [], []
    if not dry_run:
        for entry in entries:
            if entry.remove:
                try:
                    gone_targets.remove(entry)
                    removed.append(entry)
                except Busy:  # a transaction is starting on it right now: not stale after all
                    busy.append(entry)
                    note(f"skipped {entry.directory}: a hotfix command holds its lock")
            elif entry.mark:
                gone_targets.mark(entry, now)
            elif entry.state == gone_targets.LIVE:
                gone_targets.forget_marker(entry)
    if as_json:
        emit_json({"state_dir": str(state_dir()), "dry_run": dry_run, "older_than_seconds": limit,
                   "removed": [str(e.directory) for e in removed],
                   "stale": [_json(e) for e in entries if e.remove and e not in busy],
                   "targets": [_json(e) for e in entries]})
        return 0
    verb = "would remove" if dry_run else "removed"
    for entry in entries:
        if entry.state == gone_targets.LIVE:
            continue
        what = f"state of {entry.root}" if entry.root else "empty state"
        recorded = f"; recorded: {', '.join(entry.hotfixes)}" if entry.hotfixes else ""
        pending = "; an interrupted apply was pending" if entry.pending else ""
        if entry.remove and entry not in busy:
            say(f"{verb} {entry.directory}: {what} ({entry.reason}){recorded}{pending}")
        elif not entry.remove:
            confirm_hint = f"; `hotfix gc --confirm {entry.root}` removes it now" if entry.state == gone_targets.GONE else ""
            say(f"keep {entry.directory}: {what}: {entry.reason}{recorded}{pending}{confirm_hint}")
    live = sum(1 for e in entries if e.state == gone_targets.LIVE)
    going = sum(1 for e in entries if e.remove and e not in busy)
    kept = sum(1 for e in entries if not e.remove) - live
    if not entries:
        say(f"nothing to clean in {state_dir()}: no target has state")
    elif not going and not kept:
        say(f"nothing to clean in {state_dir()}: every target with state still exists ({live})")
    else:
        say(f"{'dry run: ' if dry_run else ''}{verb} {going}, kept {kept} missing, {live} exist"
            + ("; nothing was removed" if dry_run else ""))
    return 0


def _json(entry) -> dict:
    from vllm_hotfix.flow.gone_targets import iso

    return {"directory": str(entry.directory), "target": entry.root, "state": entry.state,
            "action": "remove" if entry.remove else "keep", "reason": entry.reason,
            "gone_since": iso(entry.gone_since) if entry.gone_since is not None else None,
            "hotfixes": list(entry.hotfixes), "pending": entry.pending}

"""`hotfix log`: who applied, upgraded, adopted or rolled back what, and when, per target (history.jsonl)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vllm_hotfix_guard.errors import UsageError
from vllm_hotfix_guard.output import emit_json, quote_path, say


def run(*, hotfix_id: str | None, python: str | None, root: Path | None, all_targets: bool,
        catalogs: Sequence[Path], as_json: bool) -> int:
    """Exit 0 (also with no entry), 8 when a history file or line is broken (named by file and line)."""
    from vllm_hotfix.flow.history_line import histories

    if all_targets and (python or root):
        raise UsageError("--all reads every target's history: give neither --python nor --root with it")
    if root is not None and not Path(root).is_dir():
        raise UsageError(f"--root {root}: no such directory")
    found = histories(python=python, root=root, everything=all_targets, catalogs=catalogs)
    if hotfix_id:
        found = [(where, [e for e in entries if e.hotfix == hotfix_id]) for where, entries in found]
    if as_json:
        emit_json([{"root": where, "entries": [_entry_json(e) for e in entries]} for where, entries in found])
        return 0
    shown = 0
    for where, entries in found:
        if not entries and not all_targets:
            continue
        say(f"== {quote_path(where)}")
        for e in entries:  # what another user may have written: every free text quoted like a file name
            who = quote_path(e.user) + (f" (sudo {quote_path(e.sudo_user)})" if e.sudo_user else "")
            say(f"{quote_path(e.time)}  {who}@{quote_path(e.host)}  {e.outcome:<11} {e.hotfix}@{e.version}  "
                f"{quote_path(e.fingerprint)}  series: {', '.join(e.series) or '(none)'}")
            say(f"    $ {quote_path(e.command)}" + (f"  ({quote_path(e.detail)})" if e.detail else ""))
        shown += len(entries)
    if not shown:
        say("no history recorded" + (f" for {hotfix_id}" if hotfix_id else "")
            + ("" if all_targets else " for this target (`hotfix log --all` reads every target)"))
    return 0


def _entry_json(entry) -> dict:
    from dataclasses import asdict

    doc = asdict(entry)
    doc["series"] = list(entry.series)
    return doc

"""The functions, methods and classes a recorded hotfix's hunks touch (for `hotfix status`).

The same rule as the lock's names (`hotfix export`): each step of a file's series is the hotfix's
recorded patch placed on the bytes the steps below it left (flow/series: every state re-derived and
checked against the record), its changed lines (core/regions.changed_ranges) mapped to the syntax tree
of the file it leaves (core/codeprint.touched). Read only; the names need no interpreter but this one's
parser (a file it cannot parse has none here).
"""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix_guard.core import codeprint
from vllm_hotfix.core.regions import changed_ranges, spans_of
from vllm_hotfix_guard.errors import HotfixError
from vllm_hotfix.flow.series import Series, apply_part
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.txn.state import TargetState


def recorded_names(root: Path, hotfix_ids) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """hotfix id -> path -> [(qualified name, kind)] for the Python files these recorded hotfixes change
    on ``root`` (a path whose series cannot be re-derived, or that does not parse, is left out)."""
    try:
        state = TargetState.for_root(root)
    except HotfixError:
        return {}
    wanted = set(hotfix_ids)
    series = Series(state, Tree(root))
    found: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for path, chain in series.chains.items():
        if not path.endswith(".py") or not wanted.intersection(step[0] for step in chain):
            continue
        try:
            states, _, current = series.states(path)
        except HotfixError:
            continue
        mode = current.mode if current else 0o100644
        for i, (hotfix_id, _, _) in enumerate(chain):
            before, after = states[i], states[i + 1]
            if hotfix_id not in wanted or after is None:
                continue
            try:
                _, placed = apply_part(series.part(hotfix_id, path), path, before, mode)
                regions = changed_ranges([spans_of(fp.hunks, placements) for fp, placements in placed])
                names = codeprint.touched(after, regions, path)
            except (HotfixError, SyntaxError, ValueError):
                continue
            found.setdefault(hotfix_id, {})[path] = names
    return found

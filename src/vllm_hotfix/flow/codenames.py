"""The functions, methods and classes a hotfix's hunks touch: kept in its record by `hotfix apply`
(``step_names``: what the guard checks under HOTFIX_REQUIRE, txn/lockcode.RecordCode) and shown by `hotfix status`.

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


def step_names(patch, steps) -> tuple:
    """txn/lockcode.RecordCode of one hotfix's step of each file: ``steps`` are (path, bytes before it,
    bytes after it); ``patch`` its parsed patch. A Python file whose step cannot be placed again or that
    does not parse has no names (Python would not import it either)."""
    from vllm_hotfix_guard.core.diff import Patch
    from vllm_hotfix_guard.txn.lockcode import LockedName

    out = []
    for path, before, after in steps:
        if not path.endswith(".py") or after is None:
            continue
        part = Patch(tuple(fp for fp in patch.files if path in (fp.old_path, fp.new_path)), patch.source)
        names = _names(part, path, before, after, 0o100644)
        if names is not None:
            out.append((path, tuple(LockedName(name, kind, None) for name, kind in names)))
    return tuple(out)


def _names(part, path: str, before, after: bytes, mode: int):
    """[(qualified name, kind)] one step's hunks touch in the file it leaves (the lock's rule), or None."""
    try:
        _, placed = apply_part(part, path, before, mode)
        regions = changed_ranges([spans_of(fp.hunks, placements) for fp, placements in placed])
        return codeprint.touched(after, regions, path)
    except (HotfixError, SyntaxError, ValueError):
        return None


def recorded_names(root: Path, hotfix_ids) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """hotfix id -> path -> [(qualified name, kind)] for the Python files these recorded hotfixes change
    on ``root`` (a path whose series cannot be re-derived, or that does not parse, is left out)."""
    try:
        state = TargetState.for_root(root)
    except HotfixError:
        return {}
    return _derived(state, Tree(root), set(hotfix_ids))


def names_in(state: TargetState, tree: Tree, hotfix_id: str) -> tuple:
    """txn/lockcode.RecordCode of one recorded hotfix, re-derived from its record (a record from before
    `hotfix apply` kept them gets them at its next apply)."""
    from vllm_hotfix_guard.txn.lockcode import LockedName

    found = _derived(state, tree, {hotfix_id}).get(hotfix_id, {})
    return tuple((f.path, tuple(LockedName(n, k, None) for n, k in found[f.path]))
                 for f in state.hotfixes[hotfix_id].files if f.path in found)


def _derived(state: TargetState, tree: Tree, wanted: set) -> dict[str, dict[str, list[tuple[str, str]]]]:
    series = Series(state, tree)
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
                part = series.part(hotfix_id, path)
            except HotfixError:
                continue
            names = _names(part, path, before, after, mode)
            if names is not None:
                found.setdefault(hotfix_id, {})[path] = names
    return found

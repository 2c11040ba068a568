"""The engine on real data: the diff -ruN of the vllm 0.29.0 and 0.30.0 wheels' Python sources."""

from __future__ import annotations

from pathlib import Path

import pytest
import realdata
from core_helpers import dir_reader

from vllm_hotfix_guard.core.hunk_apply import FileState, detect, plan_patch
from vllm_hotfix_guard.core.diff import parse_patch

pytestmark = pytest.mark.real


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def real():
    diff = realdata.vllm_source_diff("0.29.0", "0.30.0")
    old_root, new_root = realdata.vllm_source_tree("0.29.0"), realdata.vllm_source_tree("0.30.0")
    old, new = _tree(old_root / "vllm"), _tree(new_root / "vllm")
    return parse_patch(diff.read_bytes(), source=diff.name), old_root, new_root, old, new


def test_real_diff_shape(real):
    patch = real[0]
    assert len(patch.files) == 1106
    assert {f.kind for f in patch.files} == {"modify", "create", "delete"}


def test_every_file_planned_against_0_29_gives_0_30_and_back(real):
    patch, old_root, _, old, new = real
    plan = plan_patch(patch, dir_reader(old_root))
    assert all(not p.offset for e in plan.edits for p in e.placements)
    after = {f"vllm/{k}": v for k, v in old.items()}
    for edit in plan.edits:
        assert edit.before == after.get(edit.path)
        if edit.after is None:
            del after[edit.path]
        else:
            after[edit.path] = edit.after
    # `diff -N` cannot express a new EMPTY file (absent and empty compare equal): 0.30.0 adds two
    expected = {f"vllm/{k}": v for k, v in new.items() if v or k in old}
    assert len(new) - len(expected) == 2
    assert after == expected

    current = dict(after)

    def read_new(path: str):
        data = current.get(path)
        return None if data is None else FileState(data, 0o644)

    assert detect(patch, read_new).state == "applied"
    back = plan_patch(patch, read_new, reverse=True)
    for edit in back.edits:
        if edit.after is None:
            del current[edit.path]
        else:
            current[edit.path] = edit.after
    assert current == {f"vllm/{k}": v for k, v in old.items()}

"""Kept originals (the record's backups): one flat folder per hotfix, older records' path layout still read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from vllm_hotfix_guard.paths import TargetDir
from vllm_hotfix_guard.paths import flat_name
from vllm_hotfix_guard.txn.state import TargetState

FILES = {"pkg/__init__.py": b"", "pkg/deep/er/mod.py": b"x = 1\n", "pkg/a%2Fb.py": b"odd = 1\n", "top.py": b"t = 1\n"}
DIFF = b"".join(
    f"--- a/{rel}\n+++ b/{rel}\n@@ -1 +1 @@\n-{old.decode().strip()}\n+{old.decode().strip()}  # patched\n".encode()
    for rel, old in FILES.items() if old)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (tmp_path / "fix.diff").write_bytes(DIFF)
    return root


def test_flat_names_are_one_component_reversible_and_distinct():
    names = {p: flat_name(p) for p in ["a/b", "a%2Fb", "a%b", "x" * 300 + "/y", "top.py"]}
    assert len(set(names.values())) == len(names)
    assert all("/" not in n and len(n.encode()) <= 240 for n in names.values())
    assert names["top.py"] == "top.py" and names["a/b"] == "a%2Fb" and names["a%2Fb"] == "a%252Fb"


def test_a_new_record_keeps_its_originals_in_one_flat_folder_and_rolls_back_from_them(run_hotfix, tmp_path, _isolated_state):
    root = _tree(tmp_path)
    done = run_hotfix("apply", "--patch", tmp_path / "fix.diff", "--root", root, "--id", "fix")
    assert done.returncode == 0, done.stderr
    tdir = TargetDir.of(root)
    folder = tdir.directory / "backups" / "fix"
    assert sorted(os.listdir(folder)) == sorted(flat_name(p) for p, data in FILES.items() if data)
    assert not any(entry.is_dir() for entry in os.scandir(folder))
    recorded = TargetState.load(tdir.directory).hotfixes["fix"]
    assert recorded.backup_names == "flat"
    assert (folder / "pkg%2Fdeep%2Fer%2Fmod.py").stat().st_ino != (root / "pkg/deep/er/mod.py").stat().st_ino
    assert not (tdir.journal / "backups").exists()
    done = run_hotfix("rollback", "fix", "--root", root)
    assert done.returncode == 0 and "from the recorded backups" in done.stdout, done.stdout + done.stderr
    assert {rel: (root / rel).read_bytes() for rel in FILES} == FILES
    assert not folder.exists()


def test_a_record_written_with_the_older_path_layout_still_rolls_back_from_its_backups(run_hotfix, tmp_path, _isolated_state):
    root = _tree(tmp_path)
    assert run_hotfix("apply", "--patch", tmp_path / "fix.diff", "--root", root, "--id", "fix").returncode == 0
    tdir = TargetDir.of(root)
    folder = tdir.directory / "backups" / "fix"
    for name in os.listdir(folder):  # rewrite the state as an older version left it
        rel = name.replace("%2F", "/").replace("%25", "%")
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder / name, folder / rel) if "/" in rel else None
    doc = json.loads(tdir.state_file.read_text())
    del doc["series"][0]["backup_names"]
    tdir.state_file.write_text(json.dumps(doc))
    assert TargetState.load(tdir.directory).hotfixes["fix"].backup_names == "paths"
    done = run_hotfix("rollback", "fix", "--root", root)
    assert done.returncode == 0 and "from the recorded backups" in done.stdout, done.stdout + done.stderr
    assert {rel: (root / rel).read_bytes() for rel in FILES} == FILES
    shutil.rmtree(tdir.directory)


def test_pruning_a_flat_folder_leaves_exactly_the_recorded_originals(run_hotfix, tmp_path, _isolated_state):
    """What an upgrade over an older record leaves behind (its path-layout folders), and any orphan."""
    root = _tree(tmp_path)
    assert run_hotfix("apply", "--patch", tmp_path / "fix.diff", "--root", root, "--id", "fix").returncode == 0
    tdir = TargetDir.of(root)
    folder = tdir.directory / "backups" / "fix"
    wanted = sorted(os.listdir(folder))
    (folder / "pkg" / "deep").mkdir(parents=True)
    (folder / "pkg" / "deep" / "stale.py").write_bytes(b"left by the older layout")
    (folder / "orphan").write_bytes(b"no record names it")
    TargetState.load(tdir.directory).prune()
    assert sorted(os.listdir(folder)) == wanted

"""`hotfix gc`: the state of targets that are gone is listed (--dry-run) and removed; live targets stay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from vllm_hotfix.paths import TargetDir

PATCH = "--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,2 +1,2 @@\n line 1\n-line 2\n+line 2 fixed\n"


def make_target(path: Path) -> Path:
    (path / "vllm").mkdir(parents=True)
    (path / "vllm" / "a.py").write_text("line 1\nline 2\n")
    return path


def test_gc_lists_then_removes_only_gone_targets(run_hotfix, tmp_path, _isolated_state):
    patch = tmp_path / "fix.patch"
    patch.write_text(PATCH)
    live, gone = make_target(tmp_path / "live"), make_target(tmp_path / "gone")
    for root in (live, gone):
        assert run_hotfix("apply", "--patch", patch, "--root", root).returncode == 0
    nothing = run_hotfix("gc", "--dry-run")
    assert nothing.returncode == 0 and nothing.stdout.startswith("nothing to clean"), nothing.stdout
    shutil.rmtree(gone)

    dry = run_hotfix("gc", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["removed"] == [] and [(s["target"], s["hotfixes"]) for s in report["stale"]] == [(str(gone), ["fix"])]
    assert TargetDir.of(gone).directory.is_dir()
    assert "would remove" in run_hotfix("gc", "--dry-run").stdout

    done = run_hotfix("gc")
    assert done.returncode == 0 and f"state of {gone} (gone); recorded: fix" in done.stdout, done.stdout
    assert not TargetDir.of(gone).directory.exists()
    assert TargetDir.of(live).directory.is_dir()
    assert run_hotfix("verify", "--root", live).returncode == 0
    assert run_hotfix("gc").stdout.startswith("nothing to clean")

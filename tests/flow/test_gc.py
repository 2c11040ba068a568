"""`hotfix gc`: state of a target that is only missing for a while (a checkout moved away, a volume
not mounted) is kept until it has been missing for --older-than or its path is confirmed gone; live
targets are never touched; --dry-run shows what goes and what stays, and why, and writes nothing."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from vllm_hotfix.flow import gone_targets
from vllm_hotfix_guard.paths import TargetDir

PATCH = "--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,2 +1,2 @@\n line 1\n-line 2\n+line 2 fixed\n"
DAY = 86400.0


def make_target(path: Path) -> Path:
    (path / "vllm").mkdir(parents=True)
    (path / "vllm" / "a.py").write_text("line 1\nline 2\n")
    return path


def applied(run_hotfix, tmp_path, *names: str) -> list[Path]:
    patch = tmp_path / "fix.patch"
    patch.write_text(PATCH)
    roots = [make_target(tmp_path / name) for name in names]
    for root in roots:
        assert run_hotfix("apply", "--patch", patch, "--root", root).returncode == 0
    return roots


def by_target(report: dict) -> dict:
    return {t["target"]: t for t in report["targets"]}


def test_a_moved_checkout_is_kept_marked_and_comes_back_intact(run_hotfix, tmp_path, _isolated_state):
    live, moved = applied(run_hotfix, tmp_path, "live", "moved")
    nothing = run_hotfix("gc", "--dry-run")
    assert nothing.returncode == 0 and nothing.stdout.startswith("nothing to clean"), nothing.stdout
    away = tmp_path / "elsewhere"
    os.rename(moved, away)  # the checkout moved away (or its volume is not mounted right now)

    dry = run_hotfix("gc", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    entry = by_target(report)[str(moved)]
    assert (entry["state"], entry["action"], entry["hotfixes"]) == ("gone", "keep", ["fix"])
    assert "first seen missing now: kept until it has been missing for 7d" in entry["reason"]
    assert by_target(report)[str(live)]["action"] == "keep" and report["removed"] == report["stale"] == []
    assert not TargetDir.of(moved).gone_file.exists()  # a dry run writes nothing, not even the marker

    first = run_hotfix("gc")
    assert first.returncode == 0, first.stderr
    assert f"keep {TargetDir.of(moved).directory}: state of {moved}: first seen missing now" in first.stdout
    assert f"`hotfix gc --confirm {moved}` removes it now" in first.stdout
    marker = json.loads(TargetDir.of(moved).gone_file.read_text())
    assert marker["root"] == str(moved) and abs(marker["since"] - time.time()) < 60
    again = run_hotfix("gc", "--dry-run")
    assert f"state of {moved}: missing since {marker['since_utc']} (" in again.stdout and "kept until" in again.stdout

    os.rename(away, moved)  # back: its record and backups still work, and the clock starts over
    assert run_hotfix("verify", "--root", moved).returncode == 0
    back = run_hotfix("gc")
    assert back.returncode == 0 and back.stdout.startswith("nothing to clean"), back.stdout
    assert not TargetDir.of(moved).gone_file.exists()
    assert run_hotfix("rollback", "fix", "--root", moved).returncode == 0
    assert (moved / "vllm" / "a.py").read_text() == "line 1\nline 2\n"


def test_removed_once_missing_long_enough(run_hotfix, tmp_path, _isolated_state):
    live, gone = applied(run_hotfix, tmp_path, "live", "gone")
    shutil.rmtree(gone)
    assert "first seen missing now" in run_hotfix("gc", "--older-than", "2s").stdout
    assert TargetDir.of(gone).directory.is_dir()
    time.sleep(2.2)
    dry = json.loads(run_hotfix("gc", "--older-than", "2s", "--dry-run", "--json").stdout)
    assert [(s["target"], s["action"]) for s in dry["stale"]] == [(str(gone), "remove")]
    assert dry["removed"] == [] and TargetDir.of(gone).directory.is_dir()
    done = run_hotfix("gc", "--older-than", "2s")
    assert done.returncode == 0, done.stderr
    assert f"removed {TargetDir.of(gone).directory}: state of {gone} (missing since " in done.stdout
    assert not TargetDir.of(gone).directory.exists() and TargetDir.of(live).directory.is_dir()
    assert run_hotfix("verify", "--root", live).returncode == 0
    assert run_hotfix("gc").stdout.startswith("nothing to clean")


def test_confirm_removes_at_once_but_only_a_missing_recorded_target(run_hotfix, tmp_path, _isolated_state):
    live, gone, other = applied(run_hotfix, tmp_path, "live", "gone", "other")
    shutil.rmtree(gone)
    shutil.rmtree(other)
    before = sorted(p.name for p in TargetDir.of(live).directory.parent.iterdir())
    exists = run_hotfix("gc", "--confirm", live)
    assert exists.returncode == 3 and "it exists; gc never removes the state of a target that exists" in exists.stderr
    unknown = run_hotfix("gc", "--confirm", tmp_path / "never-recorded")
    assert unknown.returncode == 3 and "no recorded target at that path is missing" in unknown.stderr
    assert str(gone) in unknown.stderr  # the hint lists the missing ones
    bad = run_hotfix("gc", "--older-than", "a week")
    assert bad.returncode == 2 and "--older-than 'a week'" in bad.stderr
    assert sorted(p.name for p in TargetDir.of(live).directory.parent.iterdir()) == before

    done = run_hotfix("gc", "--confirm", gone, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["removed"] == [str(TargetDir.of(gone).directory)]
    assert by_target(report)[str(other)]["action"] == "keep" and TargetDir.of(other).directory.is_dir()
    assert not TargetDir.of(gone).directory.exists()


def test_the_clock_and_what_it_trusts(run_hotfix, tmp_path, _isolated_state):
    """In-process, with a given `now`: seven days counted from the first sighting; a marker that is a
    symlink, names another root, lies in the future or predates the record's last change starts over."""
    (gone,) = applied(run_hotfix, tmp_path, "gone")
    shutil.rmtree(gone)
    tdir = TargetDir.of(gone)
    t0 = time.time()
    (entry,) = gone_targets.survey(now=t0)
    assert (entry.state, entry.remove, entry.mark) == (gone_targets.GONE, False, True)
    gone_targets.mark(entry, t0)
    assert [e.remove for e in gone_targets.survey(now=t0 + 6.9 * DAY)] == [False]
    assert [e.remove for e in gone_targets.survey(now=t0 + 7 * DAY)] == [True]
    assert [e.remove for e in gone_targets.survey(now=t0 + 1 * DAY, older_than=DAY)] == [True]
    assert [e.remove for e in gone_targets.survey(now=t0, older_than=0)] == [True]

    good = tdir.gone_file.read_bytes()
    doc = json.loads(good)
    cases = {
        "another root": json.dumps({**doc, "root": "/somewhere/else"}).encode(),
        "from the future": json.dumps({**doc, "since": t0 + 31 * DAY}).encode(),
        "before the record changed": json.dumps({**doc, "since": os.lstat(tdir.state_file).st_mtime - DAY}).encode(),
        "not a number": json.dumps({**doc, "since": "long ago"}).encode(),
        "not JSON": b"\x00garbage",
        "too big": b" " * (gone_targets.MARKER_MAX + 1),
    }
    for name, data in cases.items():
        tdir.gone_file.write_bytes(data)
        (entry,) = gone_targets.survey(now=t0 + 30 * DAY)
        assert (entry.remove, entry.mark) == (False, True), name
    tdir.gone_file.unlink()
    elsewhere = tmp_path / "old-marker.json"
    elsewhere.write_bytes(good)
    tdir.gone_file.symlink_to(elsewhere)
    (entry,) = gone_targets.survey(now=t0 + 30 * DAY)
    assert (entry.remove, entry.mark) == (False, True), "symlink"


def test_empty_state_goes_at_once_and_a_live_target_is_never_touched(run_hotfix, tmp_path, _isolated_state):
    (live,) = applied(run_hotfix, tmp_path, "live")
    empty = TargetDir.of(tmp_path / "never-applied").directory
    empty.mkdir(parents=True)
    (empty / "lock").write_text("")
    done = run_hotfix("gc", "--older-than", "0")
    assert done.returncode == 0 and f"removed {empty}: empty state (nothing recorded, no target named)" in done.stdout
    assert not empty.exists() and TargetDir.of(live).directory.is_dir()

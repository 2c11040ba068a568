"""Issue 31, modes regardless of umask: every folder and file vllm-hotfix makes in the state directory has
its own mode under umask 000 and 002, and a journal, backup or kept patch another user planted is refused
(exit 6), never replayed. Real CLI in subprocesses; another user's files are made with os.chown (the
tests may run as root; as another user they are skipped)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.trees import one_file_target, snapshot

OTHER_UID = 4242  # "another user": no account needed for os.chown
EVIL = b"import os; os.system('id > /tmp/owned')\n"

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making another user's files needs root (os.chown)")


def hotfix(*args, umask: int = 0o022) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "COLUMNS"}, preexec_fn=lambda: os.umask(umask))


@pytest.fixture
def target(tmp_path) -> tuple[Path, Path]:
    return one_file_target(tmp_path, **{"keep.py": b"keep me\n"})


def error(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("hotfix: error: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def writable_by_others(state: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(state):
        for name in dirnames + filenames + ([] if dirpath != str(state) else ["."]):
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode) and stat.S_IMODE(mode) != 0o755:
                found.append(f"{path} {stat.S_IMODE(mode):o}")
            elif mode & 0o022:
                found.append(f"{path} {stat.S_IMODE(mode):o}")
    return found


@pytest.mark.parametrize("umask", [0o000, 0o002])
def test_every_folder_and_file_in_the_state_dir_has_its_own_mode_whatever_the_umask(target, _isolated_state, umask):
    root, patch = target
    os.rmdir(_isolated_state)  # made by the command, under that umask
    applied = hotfix("apply", "--patch", patch, "--root", root, umask=umask)
    assert applied.returncode == 0, applied.stderr
    assert (root / "pkg" / "m.py").read_bytes() == b"b\n"
    from vllm_hotfix_guard.paths import TargetDir

    tdir = TargetDir.of(root).directory
    assert (tdir / "backups" / "m").is_dir() and (tdir / "patches" / "m").is_dir()
    assert writable_by_others(_isolated_state) == []
    rolled = hotfix("rollback", "m", "--root", root, umask=umask)  # journal/ and journal/backups/ made too
    assert rolled.returncode == 0, rolled.stderr
    assert writable_by_others(_isolated_state) == []


def _recorded(root: Path, patch: Path) -> Path:
    from vllm_hotfix_guard.paths import TargetDir

    assert hotfix("apply", "--patch", patch, "--root", root).returncode == 0
    return TargetDir.of(root).directory


def _plant_journal(tdir: Path, root: Path, *, folder_owner: int, folder_mode: int, file_owner: int) -> None:
    """Another user's journal: "restore" pkg/m.py to their code and "remove" pkg/keep.py."""
    journal = tdir / "journal"
    (journal / "backups").mkdir(parents=True, exist_ok=True)
    (journal / "backups" / "0").write_bytes(EVIL)
    doc = {"schema": 2, "root": str(root), "tag": "123-deadbeef", "created_dirs": [], "records": [], "files": [
        {"path": "pkg/m.py", "backup": "backups/0", "before_sha256": hashlib.sha256(EVIL).hexdigest(),
         "before_mode": 0o644, "after_sha256": hashlib.sha256(b"b\n").hexdigest(), "after_mode": 0o644},
        {"path": "pkg/keep.py", "backup": None, "before_sha256": None, "before_mode": None,
         "after_sha256": hashlib.sha256(b"keep me\n").hexdigest(), "after_mode": 0o644}]}
    (journal / "journal.json").write_text(json.dumps(doc))
    for path in (journal / "backups" / "0", journal / "journal.json"):
        os.chown(path, file_owner, file_owner)
    for path in (journal, journal / "backups"):
        os.chown(path, folder_owner, folder_owner)
        os.chmod(path, folder_mode)


@pytest.mark.slow
@as_root
@pytest.mark.parametrize("folder_owner, folder_mode, file_owner", [
    (0, 0o777, OTHER_UID),          # the attack of the issue: journal/ made 0777 under umask 000
    (0, 0o775, OTHER_UID),          # umask 002 with a shared group
    (OTHER_UID, 0o755, OTHER_UID),  # another user's folder
    (0, 0o755, OTHER_UID),          # a trusted folder, another user's journal.json (planted before a chmod)
])
def test_another_users_journal_is_reported_not_replayed(target, _isolated_state, folder_owner, folder_mode, file_owner):
    root, patch = target
    tdir = _recorded(root, patch)
    _plant_journal(tdir, root, folder_owner=folder_owner, folder_mode=folder_mode, file_owner=file_owner)
    before_root, before_state = snapshot(root), snapshot(_isolated_state)
    other = root.parent / "other.diff"
    other.write_bytes(b"--- a/pkg/keep.py\n+++ b/pkg/keep.py\n@@ -1 +1 @@\n-keep me\n+kept\n")
    for command in (("recover", "--root", root), ("apply", "--patch", other, "--root", root),
                    ("rollback", "m", "--root", root)):
        done = hotfix(*command)
        assert done.returncode == 6, (command, done.stderr)
        message = error(done)
        assert "was not replayed: another user could have written it" in message, message
        assert "every file was restored" not in done.stderr
    status = hotfix("status", "--root", root, "--json")
    assert [s["state"] for s in json.loads(status.stdout)] == ["interrupted"], status.stdout  # reported
    assert snapshot(root) == before_root and snapshot(_isolated_state) == before_state
    assert (root / "pkg" / "m.py").read_bytes() == b"b\n" and (root / "pkg" / "keep.py").exists()


@as_root
def test_another_users_kept_patch_and_backup_folder_are_refused(target, _isolated_state):
    root, patch = target
    tdir = _recorded(root, patch)
    (kept,) = (tdir / "patches" / "m").iterdir()
    os.chown(kept, OTHER_UID, OTHER_UID)
    for backup in (tdir / "backups" / "m").iterdir():
        backup.unlink()  # rollback must now reverse the kept patch
    before_root, before_state = snapshot(root), snapshot(_isolated_state)
    done = hotfix("rollback", "m", "--root", root)
    assert done.returncode == 6 and f"{kept}: is owned by uid {OTHER_UID}" in error(done), done.stderr
    os.chown(kept, 0, 0)
    os.chmod(tdir / "backups" / "m", 0o777)
    before_state = snapshot(_isolated_state)
    done = hotfix("rollback", "m", "--root", root)
    assert done.returncode == 6 and "is writable by group and others (mode 777)" in error(done), done.stderr
    assert snapshot(root) == before_root and snapshot(_isolated_state) == before_state


@as_root
def test_a_backup_another_user_owns_goes_back_only_as_a_copy_of_the_recorded_bytes(tmp_path):
    """root applying to another user's venv keeps hard links of that user's files: recovery trusts such a
    backup only by its bytes, and copies it (the target never gets a link to a file another user can write);
    one that does not hold the bytes the journal names is not restored at all."""
    from vllm_hotfix_guard.errors import WriteFailed
    from vllm_hotfix.txn import recovery

    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "m.py").write_bytes(b"b\n")  # the interrupted transaction's new bytes
    journal_dir = tmp_path / "state" / "journal"
    (journal_dir / "backups").mkdir(parents=True)
    backup = journal_dir / "backups" / "0"
    backup.write_bytes(b"a\n")
    os.chown(backup, OTHER_UID, OTHER_UID)  # the original's inode, still the other user's
    doc = {"schema": 2, "root": str(root), "tag": "123-deadbeef", "created_dirs": [], "records": [], "files": [
        {"path": "pkg/m.py", "backup": "backups/0", "before_sha256": hashlib.sha256(b"a\n").hexdigest(),
         "before_mode": 0o644, "after_sha256": hashlib.sha256(b"b\n").hexdigest(), "after_mode": 0o644}]}
    (journal_dir / "journal.json").write_text(json.dumps(doc))
    report = recovery.recover(journal_dir, root)
    assert report is not None and report.restored == ("pkg/m.py",)
    assert (root / "pkg" / "m.py").read_bytes() == b"a\n"
    assert os.stat(root / "pkg" / "m.py").st_ino != os.stat(backup).st_ino if backup.exists() else True
    assert os.stat(root / "pkg" / "m.py").st_uid == 0  # a copy of ours, not the other user's inode

    (root / "pkg" / "m.py").write_bytes(b"b\n")
    (journal_dir / "backups").mkdir(exist_ok=True)
    backup.write_bytes(EVIL)  # bytes the journal does not name
    (journal_dir / "journal.json").write_text(json.dumps(doc))
    with pytest.raises(WriteFailed, match="not the original the journal names"):
        recovery.recover(journal_dir, root)
    assert (root / "pkg" / "m.py").read_bytes() == b"b\n"

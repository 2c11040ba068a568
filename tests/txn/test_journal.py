import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vllm_hotfix_guard.core.hunk_apply import FileEdit, Plan
from vllm_hotfix_guard.errors import Refused, WriteFailed
from vllm_hotfix.txn import journal, recovery
from vllm_hotfix.txn.journal import commit
from vllm_hotfix.txn.recovery import recover

BEFORE = {
    "pkg/mod.py": b"def f():\n    return 1\n",
    "pkg/old_name.py": b"x = 1\n",
    "pkg/gone.py": b"gone = True\n",
    "pkg/run.sh": b"#!/bin/sh\necho hi\n",
}
AFTER = {
    "pkg/mod.py": b"def f():\n    return 2\n",
    "pkg/new_name.py": b"x = 2\n",
    "pkg/sub/dir/created.py": b"created = True\n",
    "pkg/run.sh": b"#!/bin/sh\necho hi\n",
}


def edit(path, action, before, after, old_path=None, old_mode=None, new_mode=None):
    return FileEdit(path=path, action=action, old_path=old_path, before=before, after=after,
                    old_mode=old_mode, new_mode=new_mode, placements=())


def sample_plan():
    return Plan(edits=(
        edit("pkg/mod.py", "modify", BEFORE["pkg/mod.py"], AFTER["pkg/mod.py"]),
        edit("pkg/new_name.py", "rename", BEFORE["pkg/old_name.py"], AFTER["pkg/new_name.py"], old_path="pkg/old_name.py"),
        edit("pkg/sub/dir/created.py", "create", None, AFTER["pkg/sub/dir/created.py"]),
        edit("pkg/gone.py", "delete", BEFORE["pkg/gone.py"], None),
        edit("pkg/run.sh", "mode", BEFORE["pkg/run.sh"], AFTER["pkg/run.sh"], old_mode=0o100644, new_mode=0o755),
    ), reverse=False)


def make_tree(root: Path) -> Path:
    for rel, data in BEFORE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        os.chmod(root / rel, 0o644)
    cache = root / "pkg" / "__pycache__"
    cache.mkdir()
    (cache / "mod.cpython-312.pyc").write_bytes(b"stale")
    (cache / "module.cpython-312.pyc").write_bytes(b"other module, keep")
    return root


def snapshot(root: Path) -> dict:
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel == "pkg/__pycache__/mod.cpython-312.pyc":
                continue  # removed by a restore too
            found[rel] = None if path.is_dir() else (path.read_bytes(), os.stat(path).st_mode & 0o777)
    return found


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "root")


def test_commit_applies_every_kind_of_edit(tree, tmp_path):
    jdir = tmp_path / "journal"
    commit(tree, sample_plan(), journal_dir=jdir)
    for rel, data in AFTER.items():
        assert (tree / rel).read_bytes() == data
    assert not (tree / "pkg/old_name.py").exists() and not (tree / "pkg/gone.py").exists()
    assert os.stat(tree / "pkg/run.sh").st_mode & 0o777 == 0o755
    assert sorted(os.listdir(tree / "pkg/__pycache__")) == ["module.cpython-312.pyc"]
    assert os.listdir(jdir) == []
    assert not [p for p in tree.rglob("*") if "hotfix-tmp" in p.name]


def test_changed_since_planning_is_refused_before_writing(tree, tmp_path):
    (tree / "pkg/gone.py").write_bytes(b"edited by hand\n")
    before = snapshot(tree)
    with pytest.raises(Refused, match=r"pkg/gone.py: changed since planning"):
        commit(tree, sample_plan(), journal_dir=tmp_path / "journal")
    assert snapshot(tree) == before


@pytest.mark.parametrize("swap", ["file", "directory", "outside"])
def test_a_symlink_put_in_place_after_planning_is_refused_before_writing(tree, tmp_path, swap):
    """The commit's one lstat per file still refuses what Tree.path refuses: a symlinked file, a
    symlinked directory on the way, a path leading outside the root."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mod.py").write_bytes(BEFORE["pkg/mod.py"])
    if swap == "file":
        (tree / "pkg/mod.py").rename(tree / "pkg/mod_real.py")
        (tree / "pkg/mod.py").symlink_to(tree / "pkg/mod_real.py")
        reason = r"pkg/mod.py: is a symbolic link"
    else:
        (tree / "pkg").rename(tree / "pkg_real")
        (tree / "pkg").symlink_to(tree / "pkg_real" if swap == "directory" else elsewhere)
        reason = r"beyond a symbolic link \(pkg\)" if swap == "directory" else r"leads outside .* through a symlink"
    before, outside = snapshot(tree), snapshot(elsewhere)
    with pytest.raises(Refused, match=reason):
        commit(tree, sample_plan(), journal_dir=tmp_path / "journal")
    assert snapshot(tree) == before and snapshot(elsewhere) == outside


@pytest.mark.parametrize("failing_call", [1, 2, 3, 4])
def test_failure_midway_restores_everything(tree, tmp_path, monkeypatch, failing_call):
    before = snapshot(tree)
    calls = []
    real_replace = os.replace

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == failing_call:
            raise OSError(30, "Read-only file system", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(journal.os, "replace", replace)
    with pytest.raises(WriteFailed, match=r"Read-only file system \(EROFS\); every file was restored, nothing was changed"):
        commit(tree, sample_plan(), journal_dir=tmp_path / "journal")
    monkeypatch.undo()
    assert snapshot(tree) == before
    assert os.listdir(tmp_path / "journal") == []


CRASHER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from test_journal import sample_plan
    from vllm_hotfix.txn import journal
    n, how = int(sys.argv[1]), sys.argv[2]
    real_replace, calls = os.replace, []
    def replace(src, dst):
        calls.append(dst)
        if len(calls) == n:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGTERM)
        real_replace(src, dst)
    journal.os.replace = replace
    journal.commit(sys.argv[3], sample_plan(), journal_dir=sys.argv[4])
""")


@pytest.mark.parametrize("n", [1, 2, 3, 5])  # 1 = the journal's own rename, 2..5 = the targets
def test_kill_9_midway_then_recover_gives_before(tree, tmp_path, n):
    before = snapshot(tree)
    jdir = tmp_path / "journal"
    script = CRASHER.format(tests=str(Path(__file__).parent))
    proc = subprocess.run([sys.executable, "-c", script, str(n), "kill", str(tree), str(jdir)])
    assert proc.returncode == -signal.SIGKILL
    assert (jdir / "journal.json").exists() == (n > 1)
    report = recover(jdir)
    if n > 1:
        assert report is not None and not report.problems
        assert ("pkg/sub/dir/created.py" in report.removed) == (n > 3)
    assert snapshot(tree) == before
    assert recover(jdir) is None
    assert os.listdir(jdir) == []


def test_sigterm_midway_restores_and_exits_143(tree, tmp_path):
    before = snapshot(tree)
    jdir = tmp_path / "journal"
    script = CRASHER.format(tests=str(Path(__file__).parent))
    proc = subprocess.run([sys.executable, "-c", script, "3", "term", str(tree), str(jdir)],
                          capture_output=True, text=True)
    assert "interrupted by SIGTERM; every file was restored" in proc.stderr
    assert snapshot(tree) == before
    assert os.listdir(jdir) == []


def test_deleting_the_last_file_of_a_dir_removes_it_and_a_failure_puts_it_back(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "pkg" / "only").mkdir(parents=True)
    (root / "pkg" / "only" / "x.py").write_bytes(b"x\n")
    plan = Plan(edits=(edit("pkg/only/x.py", "delete", b"x\n", None),), reverse=False)
    commit(root, plan, journal_dir=tmp_path / "j1")
    assert root.is_dir() and os.listdir(root) == []  # pkg/only, then pkg, emptied: both gone

    (root / "pkg" / "only").mkdir(parents=True)
    (root / "pkg" / "only" / "x.py").write_bytes(b"x\n")

    failures = [OSError(28, "No space left on device")]

    def full_disk(paths):  # fails once: during the commit, not during the restore
        if failures:
            raise failures.pop()

    monkeypatch.setattr(journal, "drop_bytecode", full_disk)
    with pytest.raises(WriteFailed, match=r"^__pycache__: No space left on device \(ENOSPC\); every file was restored"):
        commit(root, plan, journal_dir=tmp_path / "j2")
    assert (root / "pkg" / "only" / "x.py").read_bytes() == b"x\n"


def test_backups_are_hard_links_of_the_original_inode(tree, tmp_path, monkeypatch):
    original_inode = os.stat(tree / "pkg/mod.py").st_ino
    linked = []
    real_backup = journal.link_backup
    monkeypatch.setattr(journal, "link_backup", lambda src, dst: (real_backup(src, dst), linked.append(os.stat(dst).st_ino)))
    commit(tree, sample_plan(), journal_dir=tmp_path / "journal")
    assert original_inode in linked


def test_an_unrecovered_journal_blocks_the_next_commit(tree, tmp_path):
    jdir = tmp_path / "journal"
    jdir.mkdir()
    (jdir / "journal.json").write_text("{}")
    with pytest.raises(Refused, match="an interrupted apply was not recovered"):
        commit(tree, sample_plan(), journal_dir=jdir)


def test_a_change_after_planning_is_caught_through_the_planning_tree(tree, tmp_path):
    from vllm_hotfix.install.tree import Tree

    planned = Tree(tree)
    assert planned.read("pkg/mod.py").data == BEFORE["pkg/mod.py"]
    (tree / "pkg/mod.py").write_bytes(BEFORE["pkg/mod.py"].replace(b"1", b"7"))  # same size
    with pytest.raises(Refused, match="pkg/mod.py: changed since planning"):
        commit(tree, sample_plan(), journal_dir=tmp_path / "journal", tree=planned)


def test_recover_target_restores_a_killed_apply_and_says_so(tree, tmp_path, capsys):
    """The one recovery step that apply (raw and catalog) and rollback run under the target lock."""
    from vllm_hotfix_guard import paths
    from vllm_hotfix.flow.transaction import recover_target

    before = snapshot(tree)
    jdir = paths.TargetDir.of(tree).journal
    script = CRASHER.format(tests=str(Path(__file__).parent))
    proc = subprocess.run([sys.executable, "-c", script, "3", "kill", str(tree), str(jdir)])
    assert proc.returncode == -signal.SIGKILL
    recover_target(tree)
    assert snapshot(tree) == before
    assert capsys.readouterr().err == (
        f"hotfix: recovered an interrupted apply on {tree}: 2 file(s) restored, 0 created file(s) removed, "
        "record as before\n")
    recover_target(tree)
    assert capsys.readouterr().err == ""


KEPT_CRASHER = CRASHER.replace(
    "journal.commit(sys.argv[3], sample_plan(), journal_dir=sys.argv[4])",
    "kept = {{}}\n"
    "for rel in ('pkg/mod.py', 'pkg/old_name.py', 'pkg/gone.py'):\n"
    "    dest = os.path.join(os.path.dirname(sys.argv[4]), 'backups', 'fix', rel.replace('/', '%2F'))\n"
    "    os.makedirs(os.path.dirname(dest), exist_ok=True)\n"
    "    os.link(os.path.join(sys.argv[3], rel), dest)\n"
    "    kept[rel] = dest\n"
    "kept['pkg/run.sh'] = os.path.join(os.path.dirname(sys.argv[4]), 'backups', 'fix', 'not-a-link-of-it')\n"
    "journal.commit(sys.argv[3], sample_plan(), journal_dir=sys.argv[4], kept=kept)")


@pytest.mark.parametrize("n", [2, 3, 5])
def test_a_journal_that_names_the_records_kept_backups_recovers_after_kill_9(tree, tmp_path, n):
    """The record's backups (hard links made by the transaction before the journal) serve as the
    journal's own: no second link per file, and recovery after kill -9 restores from them."""
    before = snapshot(tree)
    jdir = tmp_path / "journal"
    script = KEPT_CRASHER.format(tests=str(Path(__file__).parent))
    assert "kept=kept" in script
    proc = subprocess.run([sys.executable, "-c", script, str(n), "kill", str(tree), str(jdir)])
    assert proc.returncode == -signal.SIGKILL
    import json

    entries = {e["path"]: e["backup"] for e in json.loads((jdir / "journal.json").read_bytes())["files"]}
    assert entries["pkg/mod.py"] == str(tmp_path / "backups" / "fix" / "pkg%2Fmod.py")  # shared
    assert entries["pkg/run.sh"].startswith("backups/")  # the kept path is not its inode: linked here
    assert sorted(os.listdir(jdir / "backups")) == [entries["pkg/run.sh"].split("/")[1]]
    report = recover(jdir)
    assert report is not None and not report.problems
    assert snapshot(tree) == before
    assert os.listdir(jdir) == []
    assert (tmp_path / "backups" / "fix" / "pkg%2Fmod.py").read_bytes() == BEFORE["pkg/mod.py"]  # left for the record

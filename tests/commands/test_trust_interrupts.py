"""Issue 21, interrupts: a signal after the commit point does not make a complete change a failure, and
`hotfix recover` removes the temp files an interrupted transaction left -- only those. Real CLI; the
signals are injected by strace at exact system calls (the real 206k-line diff: tests/test_interrupt_real.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures import crash

FILES = 12  # more than txn.fsops.PARALLEL_MIN: the new contents are written on threads


def make_tree(root: Path) -> tuple[dict[str, bytes], bytes]:
    patch = []
    before = {}
    for n in range(FILES):
        rel = f"pkg/sub{n % 3}/m{n}.py"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"a\nb\n")
        before[rel] = b"a\nb\n"
        patch.append(b"--- a/%s\n+++ b/%s\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n" % (rel.encode(), rel.encode()))
    return before, b"".join(patch)


def files(root: Path, names) -> dict[str, bytes]:
    return {rel: (root / rel).read_bytes() for rel in names}


def temps(root: Path) -> list[Path]:
    return list(root.rglob("*.hotfix-tmp"))


def recorded(run_hotfix, root) -> list[tuple[str, str]]:
    done = run_hotfix("status", "--root", root, "--json")
    return [(s["id"], s["state"]) for s in json.loads(done.stdout) if s["recorded"]]


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    before, data = make_tree(root)
    patch = tmp_path / "fix.diff"
    patch.write_bytes(data)
    return root, patch, before


needs_strace = pytest.mark.skipif(crash.STRACE is None, reason="strace not installed")


@needs_strace
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_signal_at_or_after_the_commit_point_is_exit_0_with_the_change_complete(tree, tmp_path, run_hotfix,
                                                                                 _isolated_state, signal_name):
    root, patch, before = tree
    argv = crash.hotfix_argv("apply", "--patch", patch, "--root", root)
    calls = crash.calls(argv, tmp_path / "trace.log", ("unlink", "unlinkat", "fsync", "rmdir", "write"))

    def reset():  # the same calls in the same order for every run: a fresh state directory
        assert run_hotfix("rollback", "fix", "--root", root).returncode == 0
        assert files(root, before) == before
        shutil.rmtree(_isolated_state / "targets")

    reset()
    commit_point = next(i for i, (name, _, rest) in enumerate(calls)
                        if name.startswith("unlink") and "journal/journal.json" in rest)
    after_it = [(name, n) for name, n, _ in calls[commit_point:]]
    assert len(after_it) >= 3, calls[commit_point:]  # the journal, its directory's fsync, the clean-up
    noted = 0
    for name, n in after_it:
        done = crash.run_with(argv, name, n, f"signal={signal_name}")
        assert done.returncode == 0, (name, n, done.stderr)
        noted += f"hotfix: {signal_name} arrived after the change was committed: it stands" in done.stderr
        assert "applied 12 file(s)" in done.stdout
        assert all(data == b"A\nb\n" for data in files(root, before).values()), (name, n)
        assert recorded(run_hotfix, root) == [("fix", "applied")]
        assert temps(root) == [] and not list(_isolated_state.glob("targets/*/journal/journal.json"))
        reset()
    assert noted == len(after_it)


@needs_strace
@pytest.mark.parametrize("signal_name, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_while_the_new_contents_are_written_on_threads_leaves_no_temp_file(tree, tmp_path, run_hotfix,
                                                                                   signal_name, code):
    """The journal's own atomic write is the main thread's last write before the writer threads start:
    a signal there arrives while they start and work (strace counts calls per thread, so the threads'
    own calls cannot be aimed at)."""
    root, patch, before = tree
    argv = crash.hotfix_argv("apply", "--patch", patch, "--root", root)
    renames = crash.calls(argv, tmp_path / "trace.log", ("rename",))
    run_hotfix("rollback", "fix", "--root", root)
    journal = next(n for _, n, rest in renames if "journal/journal.json" in rest.split(", ")[-1])
    for n in (journal, journal + 1):  # the journal in place; the first switch of a new content
        done = crash.run_with(argv, "rename", n, f"signal={signal_name}")
        assert done.returncode == code, done.stderr
        assert f"interrupted by {signal_name}; every file was restored, nothing was changed" in done.stderr
        assert files(root, before) == before and temps(root) == []
        assert recorded(run_hotfix, root) == []


def test_recover_removes_only_the_temp_files_of_ours_beside_the_files_it_knows(tree, run_hotfix, tmp_path):
    root, patch, before = tree
    assert run_hotfix("apply", "--patch", patch, "--root", root).returncode == 0
    sub = root / "pkg" / "sub0"
    ours = [sub / ".m0.py.4242-0123abcd.hotfix-tmp", sub / ".m3.py.17-deadbeef-restore.hotfix-tmp"]
    for path in ours:
        path.write_bytes(b"half written\n")
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep me\n")
    decoys = {
        sub / ".m0.py.4242.hotfix-tmp": "no tag",
        sub / ".other.py.4242-0123abcd.hotfix-tmp": "beside no file hotfix knows",
        sub / "m0.py.4242-0123abcd.hotfix-tmp": "no leading dot",
        sub / ".m0.py.4242-0123ABCD.hotfix-tmp": "not our hex",
        sub / ".m0.py.4242-0123abcd.hotfix-tmp.bak": "another suffix",
        root / "notes.txt": "a file of the user's",
    }
    for path in decoys:
        path.write_bytes(b"decoy\n")
    link = sub / ".m6.py.1-00000000.hotfix-tmp"
    link.symlink_to(outside)  # our name, but a symlink: never followed, never removed
    directory = sub / ".m9.py.1-00000000.hotfix-tmp"
    directory.mkdir()
    before_decoys = {path: path.read_bytes() for path in decoys}

    done = run_hotfix("recover", "--root", root)
    assert done.returncode == 0, done.stderr
    for path in ours:
        assert not path.exists()
        assert f"  removed  {path.relative_to(root)} (a temp file an interrupted transaction left)" in done.stdout
    assert {path: path.read_bytes() for path in decoys} == before_decoys
    assert link.is_symlink() and outside.read_bytes() == b"keep me\n" and directory.is_dir()
    assert recorded(run_hotfix, root) == [("fix", "applied")]
    again = run_hotfix("recover", "--root", root, "--json")
    assert json.loads(again.stdout)["temp_files"] == []

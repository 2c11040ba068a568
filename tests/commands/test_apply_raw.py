"""`hotfix apply --patch FILE --root DIR` and `hotfix recover --root DIR`, through the real CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import realdata

A_LINES = [f"line {n}\n" for n in range(1, 31)]
BEFORE = {
    "vllm/a.py": "".join(A_LINES),
    "vllm/b.py": "to be deleted\n",
    "vllm/c.py": "".join(f"c {n}\n" for n in range(1, 11)),
    "vllm/keep.py": "untouched\n",
}
AFTER = {
    "vllm/a.py": "".join(A_LINES[:9] + ["line 10 fixed\n"] + A_LINES[10:24] + ["line 25 fixed\n"] + A_LINES[25:]),
    "vllm/c_renamed.py": "".join(f"c {n}\n" for n in range(1, 10)) + "c ten\n",
    "vllm/new/d.py": "created = True\n",
    "vllm/keep.py": "untouched\n",
}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under root, __pycache__ left out."""
    found: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in dirnames:
            found[os.path.relpath(os.path.join(dirpath, name), root)] = None
        for name in filenames:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, root)] = Path(path).read_bytes()
    return found


@pytest.fixture(scope="session")
def small_patch(tmp_path_factory) -> Path:
    """A real `git diff` touching 4 files: modify (2 hunks), delete, rename with edit, create."""
    repo = tmp_path_factory.mktemp("small-repo")
    git("init", "-q", cwd=repo)
    write_tree(repo, BEFORE)
    git("add", "-A", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "before", cwd=repo)
    for rel in ("vllm/b.py", "vllm/c.py"):
        (repo / rel).unlink()
    write_tree(repo, AFTER)
    git("add", "-A", cwd=repo)
    patch = repo.parent / "small.patch"
    patch.write_text(git("diff", "--cached", "-M", cwd=repo))
    assert "rename from vllm/c.py" in patch.read_text()
    return patch


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "root"
    write_tree(root, BEFORE)
    cache = root / "vllm" / "__pycache__"
    cache.mkdir()
    (cache / "a.cpython-312.pyc").write_bytes(b"stale bytecode")
    return root


def expected_after(root_before: dict) -> dict:
    expected = {k: v for k, v in root_before.items() if k not in ("vllm/b.py", "vllm/c.py")}
    expected.update({rel: text.encode() for rel, text in AFTER.items()})
    expected["vllm/new"] = None
    return expected


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hotfix: error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_dry_run_apply_already_applied_reverse(run_hotfix, small_patch, root):
    before = snapshot(root)
    dry = run_hotfix("apply", "--patch", small_patch, "--root", root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        "M vllm/a.py (2 hunks)",
        "D vllm/b.py (1 hunk)",
        "R vllm/c.py -> vllm/c_renamed.py (1 hunk)",
        "A vllm/new/d.py (1 hunk)",
        "dry run: would change 4 file(s), +4 -4; nothing was written",
    ]
    assert snapshot(root) == before

    applied = run_hotfix("apply", "--patch", small_patch, "--root", root, "--json")
    assert applied.returncode == 0, applied.stderr
    report = json.loads(applied.stdout)
    assert report["applied"] and not report["dry_run"] and not report["already_applied"]
    assert [(f["path"], f["action"], f["hunks"]) for f in report["files"]] == [
        ("vllm/a.py", "modify", 2), ("vllm/b.py", "delete", 1),
        ("vllm/c_renamed.py", "rename", 1), ("vllm/new/d.py", "create", 1)]
    assert snapshot(root) == expected_after(before)
    assert not (root / "vllm/__pycache__/a.cpython-312.pyc").exists()

    again = run_hotfix("apply", "--patch", small_patch, "--root", root)
    assert again.returncode == 0 and again.stdout.startswith("already applied:")
    again_json = json.loads(run_hotfix("apply", "--patch", small_patch, "--root", root, "--json").stdout)
    assert again_json == {"id": "small", "applied": False, "dry_run": False, "already_applied": True, "recorded": True, "files": []}

    reverse = run_hotfix("apply", "--patch", small_patch, "--root", root, "--reverse")
    assert reverse.returncode == 0, reverse.stderr
    assert snapshot(root) == before  # vllm/new/ removed again, as git apply -R does
    twice = run_hotfix("apply", "--patch", small_patch, "--root", root, "--reverse")
    assert twice.returncode == 0 and twice.stdout.startswith("already reversed:")


def test_two_concurrent_applies_one_applies_the_other_finds_it_applied(small_patch, root):
    before = snapshot(root)
    argv = hotfix_argv("apply", "--patch", small_patch, "--root", root)
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
    assert [code for code, _, _ in results] == [0, 0], results
    outputs = sorted(next(line for line in out.splitlines() if line.startswith(("applied", "already"))).split(" ")[0]
                     for _, out, _ in results)
    assert outputs == ["already", "applied"], results
    assert snapshot(root) == expected_after(before)


def test_offsets_are_reported(run_hotfix, small_patch, root):
    text = (root / "vllm/a.py").read_text()
    (root / "vllm/a.py").write_text("# one\n# two\n# three\n" + text)
    dry = run_hotfix("apply", "--patch", small_patch, "--root", root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"^M vllm/a.py \(2 hunks, offset \+3 at @@ -7,7 \+7,7 @@, offset \+3 at @@ -22,7 \+22,7 @@\)$",
                     dry.stdout, re.M), dry.stdout


def malformed(patch: str, root: Path) -> str:
    """Two lines cut out of the first hunk: its counts no longer match the header."""
    lines = patch.splitlines(keepends=True)
    hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    return "".join(lines[: hunk + 3] + lines[hunk + 5:])


def binary(patch: str, root: Path) -> str:
    return ("diff --git a/vllm/x.bin b/vllm/x.bin\nindex 1234567..89abcde 100644\n"
            "GIT binary patch\nliteral 3\nKcmZ?wVEh09Z~y=R\n\nliteral 0\nKcmV+b0RR6000031\n\n")


def conflict(patch: str, root: Path) -> str:
    target = root / "vllm/a.py"
    target.write_text(target.read_text().replace("line 24\n", "line 24 edited here\n"))
    return patch


def parent_escape(patch: str, root: Path) -> str:
    return "--- a/../outside.py\n+++ b/../outside.py\n@@ -1 +1 @@\n-x\n+y\n"


def absolute(patch: str, root: Path) -> str:
    return f"--- {root.parent}/outside.py\n+++ {root.parent}/outside.py\n@@ -1 +1 @@\n-x\n+y\n"


def symlink_outside(patch: str, root: Path) -> str:
    (root / "vllm/b.py").unlink()
    (root / "vllm/b.py").symlink_to(root.parent / "outside.py")
    return patch


def symlinked_dir_outside(patch: str, root: Path) -> str:
    (root / "vllm/new").symlink_to(root.parent)
    return patch


BAD_INPUTS = {  # case: (make the patch / the tree, exit code, error message pattern)
    "malformed": (malformed, 8, r"small.patch:\d+: "),
    "binary": (binary, 8, "binary diff"),
    "conflict": (conflict, 4, r"vllm/a.py.*@@ -22,7 \+22,7 @@"),
    "parent escape": (parent_escape, 3, "invalid path '.*': a '..' component"),
    "absolute": (absolute, 3, r"small.patch:1: invalid path '/.*/outside.py': it is absolute$"),
    "symlink outside": (symlink_outside, 3, "vllm/b.py: leads outside .* through a symlink"),
    "symlinked dir outside": (symlinked_dir_outside, 3, "vllm/new/d.py: leads outside .* through a symlink"),
    # issue 45: git says "patch with only garbage"; this was exit 70 (AttributeError in parse._git_file)
    "both sides /dev/null": (lambda text, root: "diff --git a/x b/x\n+++ /dev/null\n--- /dev/null\n", 8,
                             r"small.patch:1: patch with only garbage: both sides"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_changes_nothing(run_hotfix, small_patch, root, tmp_path, case):
    make, code, message = BAD_INPUTS[case]
    (tmp_path / "outside.py").write_text("x\n")
    patch = tmp_path / "small.patch"
    patch.write_text(make(small_patch.read_text(), root))
    before = snapshot(root)
    proc = run_hotfix("apply", "--patch", patch, "--root", root, *(["-p0"] if case == "absolute" else []))
    assert proc.returncode == code, proc.stderr
    assert re.search(message, one_line_error(proc)), proc.stderr
    assert snapshot(root) == before
    assert (tmp_path / "outside.py").read_text() == "x\n"


# ---- system-call fault injection with strace ----------------------------------------------------

from fixtures import crash  # noqa: E402

needs_strace = pytest.mark.skipif(crash.STRACE is None, reason="strace is not installed")
hotfix_argv = crash.hotfix_argv


def one_of(found: dict, before: dict, after: dict) -> str:
    if found == before:
        return "before"
    if found == after:
        return "after"
    raise AssertionError(f"half-applied tree: {sorted(set(found.items()) ^ set(before.items()))}")


def recorded_state(run_hotfix, root) -> str | None:
    """What `status --root` says of the raw apply ('small'), None when nothing is recorded."""
    done = run_hotfix("status", "--root", root, "--json")
    assert done.returncode in (0, 1), done.stderr
    states = [s["state"] for s in json.loads(done.stdout) if s["id"] in ("small", "(unrecorded apply)")]
    assert len(states) <= 1, states
    return states[0] if states else None


def all_points(small_patch, tmp_path) -> list[tuple[str, int]]:
    """Every point of a first apply (fresh state directory), as each run below makes it."""
    scratch = tmp_path / "scratch"
    write_tree(scratch, BEFORE)
    found = crash.points(hotfix_argv("apply", "--patch", small_patch, "--root", scratch), tmp_path / "strace.log")
    shutil.rmtree(os.environ["HOTFIX_STATE_DIR"], ignore_errors=True)
    assert len(found) >= 20, found
    return found


@pytest.mark.slow
@needs_strace
def test_kill_9_at_every_write_rename_link_unlink_fsync_then_status_and_recover_agree(run_hotfix, small_patch, root, tmp_path):
    """SIGKILL at each call: status says 'interrupted' while a journal waits; after `recover` the files
    are wholly before (nothing recorded) or wholly after (recorded, applied, rollback works)."""
    found = all_points(small_patch, tmp_path)
    before = snapshot(root)
    after = expected_after(before)
    seen = set()
    for syscall, n in found:
        shutil.rmtree(root)
        shutil.rmtree(os.environ["HOTFIX_STATE_DIR"], ignore_errors=True)
        write_tree(root, BEFORE)
        killed = crash.run_with(hotfix_argv("apply", "--patch", small_patch, "--root", root), syscall, n, "signal=SIGKILL")
        assert killed.returncode != 0, (syscall, n, killed.stdout)
        state = recorded_state(run_hotfix, root)
        if state == "interrupted":
            assert run_hotfix("verify", "--root", root).returncode == 1
        done = run_hotfix("recover", "--root", root)
        assert done.returncode == 0, done.stderr
        where = one_of(snapshot(root), before, after)
        assert not list(root.rglob("*.hotfix-tmp"))
        state = recorded_state(run_hotfix, root)
        if where == "before":
            assert state is None, (syscall, n, state)
            again = run_hotfix("apply", "--patch", small_patch, "--root", root)
            assert again.returncode == 0 and one_of(snapshot(root), before, after) == "after", again.stderr
        else:
            assert state == "applied", (syscall, n, state)
            assert run_hotfix("verify", "--root", root).returncode == 0
        back = run_hotfix("rollback", "small", "--root", root)
        assert back.returncode == 0 and snapshot(root) == before, (syscall, n, back.stderr)
        assert recorded_state(run_hotfix, root) is None
        seen.add(where)
    assert seen == {"before", "after"}


@pytest.mark.slow
@needs_strace
@pytest.mark.parametrize("error, text, hint", [
    ("EROFS", "Read-only file system", "`hotfix compose` bind-mounts them read-only"),
    ("ENOSPC", "No space left on device", "free some space there"),
])
def test_write_errors_at_every_point_restore_everything(run_hotfix, small_patch, root, tmp_path, error, text, hint):
    found = [(s, n) for s, n in all_points(small_patch, tmp_path) if s in ("write", "rename")]
    before = snapshot(root)
    after = expected_after(before)
    for syscall, n in found:
        shutil.rmtree(os.environ["HOTFIX_STATE_DIR"], ignore_errors=True)
        failed = crash.run_with(hotfix_argv("apply", "--patch", small_patch, "--root", root), syscall, n, f"error={error}")
        assert not list(root.rglob("*.hotfix-tmp"))
        if failed.returncode == 0:  # past the commit point: the apply is complete and recorded
            assert snapshot(root) == after and recorded_state(run_hotfix, root) == "applied", (syscall, n)
            assert run_hotfix("rollback", "small", "--root", root).returncode == 0
            continue
        assert failed.returncode == 6, (syscall, n, failed.stderr)
        line = one_line_error(failed)
        assert f"{text} ({error}); every file was restored, nothing was changed" in line, line
        assert "hotfix: hint: " in failed.stderr and hint in failed.stderr, failed.stderr
        assert snapshot(root) == before, (syscall, n)
        assert recorded_state(run_hotfix, root) is None, (syscall, n)


@needs_strace
@pytest.mark.parametrize("signal_name, code", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("when", [1, 3, 6])
def test_sigint_sigterm_midway_restore_everything(run_hotfix, small_patch, root, signal_name, code, when):
    before = snapshot(root)
    stopped = crash.run_with(hotfix_argv("apply", "--patch", small_patch, "--root", root), "rename", when,
                             f"signal={signal_name}")
    assert stopped.returncode == code, stopped.stderr
    assert f"interrupted by {signal_name}; every file was restored, nothing was changed" in one_line_error(stopped)
    assert snapshot(root) == before
    assert not list(root.rglob("*.hotfix-tmp"))
    assert recorded_state(run_hotfix, root) is None


def test_recover_with_nothing_to_do(run_hotfix, root):
    done = run_hotfix("recover", "--root", root)
    assert done.returncode == 0 and done.stdout.startswith("nothing to recover")
    assert json.loads(run_hotfix("recover", "--root", root, "--json").stdout)["recovered"] is False


def test_catalog_apply_is_not_raw(run_hotfix, root):
    proc = run_hotfix("apply", "some-id", "--root", root)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr


# ---- the real 0.29.0 -> 0.30.0 diff ------------------------------------------------------------


@pytest.mark.real
@pytest.mark.slow
def test_real_diff_same_as_git_apply_and_reverses_byte_for_byte(run_hotfix, tmp_path):
    old, new = realdata.vllm_source_tree("0.29.0"), realdata.vllm_source_tree("0.30.0")
    diff = realdata.vllm_source_diff("0.29.0", "0.30.0")
    ours, theirs = tmp_path / "hotfix", tmp_path / "git"
    shutil.copytree(old, ours, symlinks=True)
    shutil.copytree(old, theirs, symlinks=True)

    applied = run_hotfix("apply", "--patch", diff, "--root", ours)
    assert applied.returncode == 0, applied.stderr
    assert any(line.startswith("applied 1106 file(s)") for line in applied.stdout.splitlines()), applied.stdout[-500:]
    subprocess.run(["git", "apply", "--whitespace=nowarn", str(diff)], cwd=theirs, check=True)
    result = snapshot(ours)
    assert result == snapshot(theirs)
    # diff -ruN cannot express empty files; everything else is 0.30.0 exactly
    upstream = snapshot(new)
    empty_only = {k for k in upstream.keys() - result.keys() if upstream[k] in (b"", None)}
    assert {k: v for k, v in upstream.items() if k not in empty_only} == result

    again = run_hotfix("apply", "--patch", diff, "--root", ours)
    assert again.returncode == 0 and again.stdout.startswith("already applied")

    reverse = run_hotfix("apply", "--patch", diff, "--root", ours, "--reverse")
    assert reverse.returncode == 0, reverse.stderr
    assert snapshot(ours) == snapshot(old)


@needs_strace
def test_after_a_kill_9_the_dry_run_predicts_the_run(run_hotfix, root, tmp_path):
    """Issue 45: after a kill -9 between a file's switch and the commit, `apply --dry-run` refused (exit 3,
    "re-apply or roll back") while the real apply recovers and applies (exit 0): the dry run plans on the
    files and record as recovering leaves them (read only) and says what the run does; it writes nothing."""
    first, second = tmp_path / "first.patch", tmp_path / "second.patch"
    first.write_text("--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1,3 +1,3 @@\n line 1\n-line 2\n+line 2 first\n line 3\n")
    second.write_text("--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -19,3 +19,3 @@\n line 19\n-line 20\n+line 20 second\n"
                      " line 21\n")
    assert run_hotfix("apply", "--patch", first, "--root", root, "--id", "first").returncode == 0
    argv = hotfix_argv("apply", "--patch", second, "--root", root, "--id", "second")
    at = crash.after_switching(argv, root / "vllm" / "a.py", tmp_path / "trace.log")
    # the traced run applied it: roll it back, then kill the next one right after the switch
    assert run_hotfix("rollback", "second", "--root", root).returncode == 0
    assert crash.run_with(argv, "rename", at, "signal=SIGKILL").returncode != 0
    assert "line 20 second" in (root / "vllm" / "a.py").read_text()  # the file switched, the record not
    state_dir = Path(os.environ["HOTFIX_STATE_DIR"])
    files_before, state_before = snapshot(root), snapshot(state_dir)
    dry = run_hotfix("apply", "--patch", second, "--root", root, "--id", "second", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert snapshot(root) == files_before and snapshot(state_dir) == state_before  # nothing written
    real = run_hotfix("apply", "--patch", second, "--root", root, "--id", "second", "--json")
    assert real.returncode == 0, real.stderr
    predicted, done = json.loads(dry.stdout), json.loads(real.stdout)
    assert predicted["files"] == done["files"] and predicted["already_applied"] == done["already_applied"] is False
    assert run_hotfix("verify", "--root", root).returncode == 0


def test_a_name_with_a_backslash_is_written_recorded_read_and_rolled_back(run_hotfix, root, tmp_path):
    """Issue 45 (git's t4135): `post\\image.txt` is a name git applies; the record hotfix wrote for it wedged the
    target (every command exit 8, "unsafe path ... (backslash or NUL)"). One path rule for write and read."""
    patch = tmp_path / "bs.diff"
    patch.write_text("diff --git a/post\\image.txt b/post\\image.txt\nnew file mode 100644\n--- /dev/null\n"
                     "+++ b/post\\image.txt\n@@ -0,0 +1 @@\n+hello\n")
    before = snapshot(root)
    assert run_hotfix("apply", "--patch", patch, "--root", root, "--id", "bs").returncode == 0
    assert (root / "post\\image.txt").read_text() == "hello\n"
    for command in (("status",), ("verify",), ("log",)):
        done = run_hotfix(*command, "--root", root)
        assert done.returncode == 0, (command, done.stderr)
    assert run_hotfix("rollback", "bs", "--root", root).returncode == 0
    assert snapshot(root) == before


def test_a_corrupt_record_s_remedy_is_not_the_permissions(run_hotfix, small_patch, root):
    """Issue 45: a corrupt state.json said "fix its permissions"; it says how to get out (exit 8, files kept)."""
    assert run_hotfix("apply", "--patch", small_patch, "--root", root).returncode == 0
    (state,) = Path(os.environ["HOTFIX_STATE_DIR"]).rglob("state.json")
    state.write_text('{"schema": 2, "target": ')
    before = snapshot(root)
    for command in (("status",), ("rollback", "small")):
        done = run_hotfix(*command, "--root", root)
        assert done.returncode == 8 and "permissions" not in done.stderr, done.stderr
        assert "move the state folder aside" in done.stderr
    assert snapshot(root) == before

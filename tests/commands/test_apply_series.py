"""`hotfix apply A B C` (flow/apply_group): several catalog hotfixes in one transaction. Fast: a small checkout
of pkg 1.0 and a catalog of three hotfixes -- ``one`` and ``three`` in pkg/mod.py (three on top of one),
``two`` in pkg/other.py. A failure of the 2nd of 3 (its post-apply check, after the commit; or its diff, at
planning) leaves the tree and the state directory byte-identical; a dry run writes nothing. And the one
write the members' plans are composed into (flow/apply_group.compose)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.manifests import write_patch_catalog
from fixtures.trees import snapshot

MOD = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(1, 9))
OTHER = "X = 1\nY = 2\n"


def _diff(path: str, old: str, new: str, text: str) -> bytes:
    """A unified diff of ``text`` with its one line ``old`` replaced by ``new`` (three lines of context)."""
    lines = text.splitlines(keepends=True)
    at = lines.index(old)
    start, end = max(0, at - 3), min(len(lines), at + 4)
    body = "".join((" " + line) if i != at else f"-{old}+{new}" for i, line in enumerate(lines[start:end], start))
    count = end - start
    return f"--- a/{path}\n+++ b/{path}\n@@ -{start + 1},{count} +{start + 1},{count} @@\n{body}".encode()


ONE = _diff("pkg/mod.py", "    return 1\n", "    return 10\n", MOD)
THREE = _diff("pkg/mod.py", "    return 8\n", "    return 80\n", MOD)
TWO = _diff("pkg/other.py", "X = 1\n", "X = 100\n", OTHER)


def _catalog(path: Path, two_extra: str = "", two: bytes = TWO) -> Path:
    for hotfix_id, patch, extra in (("one", ONE, ""), ("two", two, two_extra), ("three", THREE, "")):
        write_patch_catalog(path, hotfix_id, patch, distribution="pkg", versions=">=1.0", fixed_in=None,
                            title=f"{hotfix_id}: a test hotfix", extra=extra)
    return path


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(MOD)
    (root / "pkg" / "other.py").write_text(OTHER)
    (root / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "1.0"\n')
    return root


def _both(tree: Path, state: Path) -> tuple:
    return snapshot(tree), snapshot(state)


def _files(state: Path) -> dict:
    """The state directory's files but the target's mutex (``lock``, empty: made by the first command that
    takes it, a refused single apply too) and the folders it is made in."""
    return {k: v for k, v in snapshot(state).items() if isinstance(v[0], bytes) and not k.endswith("/lock")}


def test_three_hotfixes_in_one_transaction_recorded_in_order(tree, tmp_path, run_hotfix, _isolated_state):
    catalog = _catalog(tmp_path / "catalog")
    options = ("--root", tree, "--catalog", catalog)
    done = run_hotfix("apply", "one", "two", "three", *options)
    assert done.returncode == 0, done.stderr
    assert f"applied one@1, two@1, three@1 to pkg 1.0 at {tree}, in this order, all-or-nothing in one transaction: " \
           "2 file(s)" in done.stdout
    patched = MOD.replace("return 1\n", "return 10\n").replace("return 8\n", "return 80\n")
    assert (tree / "pkg" / "mod.py").read_text() == patched
    assert (tree / "pkg" / "other.py").read_text() == OTHER.replace("X = 1", "X = 100")
    status = json.loads(run_hotfix("status", *options, "--json").stdout)
    assert [(s["id"], s["state"]) for s in status if s["recorded"]] == [("one", "applied"), ("two", "applied"),
                                                                        ("three", "applied")]
    assert run_hotfix("verify", *options).returncode == 0
    (log,) = [t["entries"] for t in json.loads(run_hotfix("log", "--root", tree, "--json").stdout)]
    assert [(e["outcome"], e["hotfix"]) for e in log] == [("applied", "one"), ("applied", "two"), ("applied", "three")]
    assert [e["series"] for e in log] == [["one"], ["one", "two"], ["one", "two", "three"]]
    # each rolls back on its own: the series was recorded exactly as three single applies would have
    for hotfix_id in ("three", "one", "two"):
        assert run_hotfix("rollback", hotfix_id, "--root", tree).returncode == 0
    assert (tree / "pkg" / "mod.py").read_text() == MOD and (tree / "pkg" / "other.py").read_text() == OTHER


def test_a_failed_post_apply_check_of_the_second_undoes_all_three(tree, tmp_path, run_hotfix, _isolated_state):
    catalog = _catalog(tmp_path / "catalog", two_extra='\n[[checks]]\nfile = "pkg/other.py"\ncontains = "never"\n')
    options = ("--root", tree, "--catalog", catalog)
    assert run_hotfix("apply", "one", *options).returncode == 0  # a series below the group stays as it is
    before = _both(tree, _isolated_state)
    done = run_hotfix("apply", "three", "two", *options)
    assert done.returncode == 3 and "post-apply check failed, every file and the record were restored" in done.stderr
    assert _both(tree, _isolated_state) == before


def test_a_second_that_does_not_apply_refuses_before_anything_is_written(tree, tmp_path, run_hotfix, _isolated_state):
    catalog = _catalog(tmp_path / "catalog", two=TWO.replace(b" Y = 2", b" Y = 3"))
    before = snapshot(tree)
    done = run_hotfix("apply", "one", "two", "three", "--root", tree, "--catalog", catalog)
    assert done.returncode == 4 and "pkg/other.py" in done.stderr, done.stderr
    assert snapshot(tree) == before and _files(_isolated_state) == {}


def test_dry_run_shows_the_whole_plan_and_writes_nothing(tree, tmp_path, run_hotfix, _isolated_state):
    catalog = _catalog(tmp_path / "catalog")
    options = ("--root", tree, "--catalog", catalog)
    before = _both(tree, _isolated_state)
    done = run_hotfix("apply", "one", "two", "three", *options, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith(("M ", "would apply", "dry run"))] == [
        "M pkg/mod.py (1 hunk)", "would apply one@1: 1 file(s)", "M pkg/other.py (1 hunk)",
        "would apply two@1: 1 file(s)", "M pkg/mod.py (1 hunk)", "would apply three@1: 1 file(s)",
        f"dry run: would apply one@1, two@1, three@1 to pkg 1.0 at {tree}, in this order, in one transaction: "
        "2 file(s); nothing was written"]
    report = json.loads(run_hotfix("apply", "one", "two", "three", *options, "--dry-run", "--json").stdout)
    assert [(r["id"], r["dry_run"], r["applied"], [f["path"] for f in r["files"]]) for r in report] == [
        ("one", True, False, ["pkg/mod.py"]), ("two", True, False, ["pkg/other.py"]),
        ("three", True, False, ["pkg/mod.py"])]
    assert _both(tree, _isolated_state) == before


def test_one_id_keeps_its_json_and_a_mix_with_an_applied_one(tree, tmp_path, run_hotfix, _isolated_state):
    catalog = _catalog(tmp_path / "catalog")
    options = ("--root", tree, "--catalog", catalog)
    single = json.loads(run_hotfix("apply", "one", *options, "--json").stdout)
    assert isinstance(single, dict) and single["id"] == "one" and single["applied"]
    done = run_hotfix("apply", "one", "two", *options, "--json")
    assert done.returncode == 0, done.stderr
    assert [(r["id"], r["applied"], r["already_applied"]) for r in json.loads(done.stdout)] == [
        ("one", False, True), ("two", True, False)]
    again = run_hotfix("apply", "one", "two", *options)
    assert again.returncode == 0 and "nothing to do: every one of one@1, two@1 is in effect" in again.stdout


@pytest.mark.parametrize("ids,code,words", [
    (("one", "two", "one"), 2, "one is named twice (one, one)"),
    (("one", "two@1", "two"), 2, "two is named twice (two@1, two)"),
    (("one", "no-such-fix"), 3, "no-such-fix"),
])
def test_refused_before_anything_is_written(tree, tmp_path, run_hotfix, _isolated_state, ids, code, words):
    catalog = _catalog(tmp_path / "catalog")
    before = _both(tree, _isolated_state)
    done = run_hotfix("apply", *ids, "--root", tree, "--catalog", catalog)
    assert done.returncode == code and words in done.stderr, done.stderr
    assert _both(tree, _isolated_state) == before


def test_compose_writes_each_path_once_from_its_first_before_to_its_last_after():
    from vllm_hotfix.flow.apply_group import compose
    from vllm_hotfix_guard.core.hunk_apply import FileEdit, Plan

    def edit(path, action, before, after, old_path=None, old_mode=0o100644, new_mode=None):
        return FileEdit(path, action, old_path, before, after, None if before is None else old_mode, new_mode, ())

    first = Plan((edit("m.py", "modify", b"1", b"2"), edit("new.py", "create", None, b"n"),
                  edit("b.py", "rename", b"a", b"a", old_path="a.py"), edit("x.py", "modify", b"x", b"y")), False)
    second = Plan((edit("m.py", "modify", b"2", b"3", new_mode=0o755), edit("new.py", "delete", b"n", None),
                   edit("b.py", "modify", b"a", b"b"), edit("x.py", "modify", b"y", b"x")), False)
    plan = compose([first, second])
    assert [(e.path, e.action, e.before, e.after, e.new_mode) for e in plan.edits] == [
        ("m.py", "modify", b"1", b"3", 0o755), ("a.py", "delete", b"a", None, None),
        ("b.py", "create", None, b"b", 0o644)]  # new.py made and removed, x.py given back: not written

"""history.jsonl is part of the transaction (issue 24 item 11): SIGKILL (strace) at every write, rename,
link, unlink and fsync of an apply, then `hotfix recover`: the history has the apply's line if and only
if the files and the record are "after" -- a crash neither loses nor invents an entry. Twice: a stacked
apply on a real vLLM 0.30.0 (pr77-postprocess on top of mamba-align-block-size), and a raw apply whose
line makes a full history.jsonl rotate (history.1.jsonl and history.jsonl switch in the same commit).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import crash
from fixtures.series import MAMBA, MAMBA_ID, series_catalog
from vllm_hotfix_guard.paths import TargetDir

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.skipif(crash.STRACE is None, reason="strace not installed")]

TOP = "pr77-postprocess"


def raw(tdir: TargetDir) -> bytes:
    return b"".join(p.read_bytes() for p in (tdir.history_rotated, tdir.history_file) if p.exists())


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return series_catalog(tmp_path_factory)


def _stacked(vllm_install, run_hotfix, catalog, tmp_path):
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    assert run_hotfix("apply", MAMBA_ID, *options).returncode == 0
    return venv.site_packages / MAMBA, venv.site_packages, options, crash.hotfix_argv("apply", TOP, *options), TOP


def _rotating(vllm_install, run_hotfix, catalog, tmp_path):
    from vllm_hotfix.txn import history

    root = tmp_path / "src"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    for name in ("a", "b"):
        (root / "vllm" / f"{name}.py").write_text("line 1\nline 2\n")
    first, second = tmp_path / "first.diff", tmp_path / "second.diff"
    for diff, name in ((first, "a"), (second, "b")):
        diff.write_text(f"--- a/vllm/{name}.py\n+++ b/vllm/{name}.py\n@@ -1,2 +1,2 @@\n line 1\n-line 2\n+line two\n")
    options = ("--root", str(root))
    assert run_hotfix("apply", "--patch", first, *options).returncode == 0
    tdir = TargetDir.of(root)
    line = tdir.history_file.read_bytes()
    tdir.history_file.write_bytes(line * (history.HISTORY_CAP // len(line)))  # full: the next line rotates it
    tdir.history_rotated.write_bytes(line)  # the generation the rotation drops
    return root / "vllm" / "b.py", root, options, crash.hotfix_argv("apply", "--patch", second, *options), "second"


@pytest.mark.parametrize("setup", [_stacked, _rotating], ids=["stacked-apply", "rotating-raw-apply"])
def test_sigkill_at_every_call_then_recover_the_history_has_the_line_iff_the_change_stands(
        setup, catalog, vllm_install, tmp_path, _isolated_state, run_hotfix):
    target, root, options, argv, hotfix_id = setup(vllm_install, run_hotfix, catalog, tmp_path)
    tdir = TargetDir.of(root)
    start = crash.Start(target, _isolated_state / "targets", tmp_path / "saved-state")
    history_before = raw(tdir)
    old = lines(tdir.history_rotated) + lines(tdir.history_file)
    points = crash.points(argv, tmp_path / "trace.log")
    after = target.read_bytes()
    assert after != start.before
    new = lines(tdir.history_rotated) + lines(tdir.history_file)
    assert new[:-1] == old[-len(new) + 1:] and new[-1]["hotfix"] == hotfix_id and new[-1]["outcome"] == "applied"
    start.reset()
    assert len(points) >= 15, points

    def after_kill(syscall, n) -> str:
        now = crash.recovered(run_hotfix, options, start, after, (syscall, n))
        recorded = json.loads(tdir.state_file.read_text())["series"]
        assert (hotfix_id in [h["id"] for h in recorded]) == (now == after), (syscall, n)
        rotated, current = lines(tdir.history_rotated), lines(tdir.history_file)
        if now == start.before:
            assert raw(tdir) == history_before, (syscall, n)
        else:
            assert current[-1]["hotfix"] == hotfix_id and (rotated + current)[:-1] == old[-len(rotated + current) + 1:], \
                (syscall, n)
        listed = run_hotfix("log", *options, "--json")
        assert listed.returncode == 0, (syscall, n, listed.stderr)
        return "after" if now == after else "before"

    assert crash.kill_at_every_point(argv, points, start.reset, after_kill) == {"before", "after"}

"""`hotfix apply A B` on a real vLLM 0.30.0 install: the test catalog of tests/flow/test_state_matrix.py,
``two-files`` (vllm/envs.py + vllm/version.py) and ``top-note`` on top of it in envs.py, in one command and
one transaction (flow/apply_group); then status shows both applied, in order, and verify exits 0. And
SIGKILL (strace) at every write-side call of that group apply, then `hotfix recover`: both files and the
record are wholly before (nothing recorded) or wholly after (both applied), never one hotfix without the other.
"""

from __future__ import annotations

import json

import pytest

import realdata
from fixtures import crash
from fixtures.series import write_catalog
from fixtures.twofiles import ENVS, TOP_NOTE, VERSION, make_two_file_patch, snapshot, top_note_diff

pytestmark = pytest.mark.real

A, B = "two-files", "top-note"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    base = tmp_path_factory.mktemp("group")
    site = realdata.vllm_template("0.30.0").site_packages
    two = make_two_file_patch(site, base / "diff").read_bytes()
    return write_catalog(base / "catalog", {A: (two, ""), B: (top_note_diff(site, base / "top"), "")})


def recorded(run_hotfix, options) -> list[tuple[str, str]]:
    done = run_hotfix("status", *options, "--json")
    return [(s["id"], s["state"]) for s in json.loads(done.stdout) if s["recorded"]]


def test_two_real_hotfixes_in_one_command_then_status_and_verify(catalog, vllm_install, run_hotfix):
    venv = vllm_install("0.30.0")
    options = ("--python", venv.python, "--catalog", catalog)
    pristine = snapshot(venv.site_packages)
    dry = run_hotfix("apply", A, B, *options, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "in one transaction: 2 file(s); nothing was written" in dry.stdout
    assert snapshot(venv.site_packages) == pristine
    done = run_hotfix("apply", A, B, *options, "--json")
    assert done.returncode == 0, done.stderr
    assert [(r["id"], r["applied"], sorted(f["path"] for f in r["files"])) for r in json.loads(done.stdout)] == [
        (A, True, [ENVS, VERSION]), (B, True, [ENVS])]
    envs = (venv.site_packages / ENVS).read_bytes()
    assert envs.startswith(b"# hotfix: two-file test, marker one\n") and envs.endswith(TOP_NOTE)
    assert recorded(run_hotfix, options) == [(A, "applied"), (B, "applied")]
    verify = run_hotfix("verify", *options)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert run_hotfix("rollback", A, *options).returncode == 0  # the series, as two applies would record it
    assert recorded(run_hotfix, options) == [(B, "applied")]


@pytest.mark.slow
@pytest.mark.skipif(crash.STRACE is None, reason="strace not installed")
def test_sigkill_at_every_call_of_a_group_apply_then_recover(catalog, vllm_install, tmp_path, _isolated_state,
                                                             run_hotfix):
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    version = venv.site_packages / VERSION
    (_isolated_state / "targets").mkdir(exist_ok=True)
    start = crash.Start(venv.site_packages / ENVS, _isolated_state / "targets", tmp_path / "saved-state")
    version_before = version.read_bytes()
    argv = crash.hotfix_argv("apply", A, B, *options)
    points = crash.points(argv, tmp_path / "trace.log")
    after = snapshot(venv.site_packages)
    assert recorded(run_hotfix, options) == [(A, "applied"), (B, "applied")]

    def reset() -> None:
        start.reset()
        version.write_bytes(version_before)

    reset()
    assert len(points) >= 15, points

    def after_kill(syscall, n) -> str:
        now = crash.recovered(run_hotfix, options, start, after[ENVS], (syscall, n))
        whole = "before" if now == start.before else "after"
        assert version.read_bytes() == (version_before if whole == "before" else after[VERSION]), (syscall, n)
        series = recorded(run_hotfix, options)
        assert series == ([] if whole == "before" else [(A, "applied"), (B, "applied")]), (syscall, n, series)
        if whole == "after":
            assert run_hotfix("verify", *options).returncode == 0, (syscall, n)
        return whole

    assert crash.kill_at_every_point(argv, points, reset, after_kill) == {"before", "after"}

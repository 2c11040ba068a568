"""Crash safety of the series on a real vLLM 0.30.0: SIGKILL (strace) at every write, rename, link,
unlink and fsync of a stacked apply (pr77-postprocess on top of mamba-align-block-size, in the same file)
and of a rollback under another hotfix (mamba-align-block-size out from under pr77-postprocess, whose
record is re-derived in the same transaction); then `hotfix recover`. The files and the records are
wholly before or wholly after, and status agrees with them: every recorded hotfix is applied.
"""

from __future__ import annotations

import json

import pytest

from fixtures import crash
from fixtures.series import MAMBA, MAMBA_ID, series_catalog

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.skipif(crash.STRACE is None, reason="strace not installed")]

TOP = "pr77-postprocess"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return series_catalog(tmp_path_factory)


def recorded(run_hotfix, options) -> list[tuple[str, str]]:
    done = run_hotfix("status", *options, "--json")
    return [(s["id"], s["state"]) for s in json.loads(done.stdout) if s["recorded"]]


@pytest.mark.parametrize("command", ["stacked-apply", "rollback-under"])
def test_sigkill_at_every_call_of_a_series_change_then_recover(command, catalog, vllm_install, tmp_path,
                                                               _isolated_state, run_hotfix):
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    target = venv.site_packages / MAMBA
    assert run_hotfix("apply", MAMBA_ID, *options).returncode == 0
    if command == "rollback-under":
        assert run_hotfix("apply", TOP, *options).returncode == 0
        argv = crash.hotfix_argv("rollback", MAMBA_ID, *options)
        series_before, series_after = [(MAMBA_ID, "applied"), (TOP, "applied")], [(TOP, "applied")]
    else:
        argv = crash.hotfix_argv("apply", TOP, *options)
        series_before, series_after = [(MAMBA_ID, "applied")], [(MAMBA_ID, "applied"), (TOP, "applied")]
    start = crash.Start(target, _isolated_state / "targets", tmp_path / "saved-state")
    points = crash.points(argv, tmp_path / "trace.log")
    after = target.read_bytes()
    assert after != start.before and recorded(run_hotfix, options) == series_after
    start.reset()
    assert len(points) >= 15, points

    def after_kill(syscall, n) -> str:
        now = crash.recovered(run_hotfix, options, start, after, (syscall, n))
        series = recorded(run_hotfix, options)
        assert series == (series_before if now == start.before else series_after), (syscall, n, series)
        assert run_hotfix("verify", *options).returncode == 0, (syscall, n)
        return "after" if now == after else "before"

    assert crash.kill_at_every_point(argv, points, start.reset, after_kill) == {"before", "after"}

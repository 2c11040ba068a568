"""A package upgraded under the record (`pip install vllm==X` into the same venv) is named as such, and
what applies to the new release is said: re-apply (the patch for that release) or fixed upstream."""

from __future__ import annotations

import json

import pytest

import realdata

pytestmark = pytest.mark.slow

MAMBA = "mamba-align-block-size"


def status(run_hotfix, python) -> tuple[dict, int]:
    done = run_hotfix("status", MAMBA, "--python", python, "--json")
    (entry,) = json.loads(done.stdout)
    return entry, done.returncode


def test_upgrade_under_the_record_then_reapply_then_fixed_upstream(vllm_install, run_hotfix):
    venv = vllm_install("0.25.0")
    assert run_hotfix("apply", MAMBA, "--python", venv.python).returncode == 0

    realdata.pip_install(venv, str(realdata.vllm_wheel("0.26.0")))  # a real in-place upgrade
    assert run_hotfix("audit", "vllm", "--python", venv.python).returncode == 0  # pristine 0.26.0
    entry, code = status(run_hotfix, venv.python)
    assert (entry["state"], code) == ("lost", 1), entry
    assert "changed from 0.25.0 to 0.26.0 under the record" in entry["detail"], entry
    assert f"hotfix apply {MAMBA} --python" in entry["advice"] and "0.26.0" in entry["advice"], entry
    assert run_hotfix("verify", "--python", venv.python).returncode == 1

    again = run_hotfix("apply", MAMBA, "--python", venv.python)
    assert again.returncode == 0, again.stderr
    entry, code = status(run_hotfix, venv.python)
    assert (entry["state"], code) == ("applied", 0), entry

    realdata.pip_install(venv, str(realdata.vllm_wheel("0.32.0")))
    entry, code = status(run_hotfix, venv.python)
    assert (entry["state"], code) == ("fixed-upstream", 0), entry
    assert "changed from 0.26.0 to 0.32.0 under the record" in entry["detail"], entry
    assert run_hotfix("apply", MAMBA, "--python", venv.python).returncode == 5

"""What an SRE looks at (issue 24 items 4, 11 and the overlay warning): one warning for a PYTHONPATH
overlay in apply, audit, status and verify, on a real vLLM 0.30.0 install."""

from __future__ import annotations

import json

import pytest

import realdata

pytestmark = pytest.mark.real

HOTFIX = "mamba-align-block-size"
PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("hotfix: warning: ")]


def test_a_pythonpath_overlay_gets_the_same_warning_from_apply_audit_status_and_verify(vllm_template, run_hotfix,
                                                                                       tmp_path):
    venv = vllm_template("0.30.0")  # read only: nothing below writes
    overlay = realdata.python_sources(venv.site_packages, tmp_path / "overlay")
    env = {"PYTHONPATH": str(overlay)}
    said = {}
    for command in (("apply", HOTFIX, "--dry-run"), ("audit", "vllm"), ("status",), ("verify", HOTFIX)):
        done = run_hotfix(*command, "--python", venv.python, env=env)
        assert done.returncode in (0, 1), done.stderr
        said[command[0]] = warnings_of(done.stderr)
    shadow = (f"hotfix: warning: vllm is loaded from {overlay / 'vllm'} (PYTHONPATH entry {overlay}), which shadows "
              f"the installed vllm 0.30.0 at {venv.package_dir}: edits to either copy affect only that copy")
    assert said["apply"][0] == shadow and said["apply"][1].startswith("hotfix: warning: 2 copies of vllm on sys.path")
    assert said["audit"] == said["status"] == said["verify"] == said["apply"]
    status = json.loads(run_hotfix("status", "--python", venv.python, "--json", env=env).stdout)
    assert all(s["warnings"] == [w[len("hotfix: warning: "):] for w in said["apply"]] for s in status)
    assert warnings_of(run_hotfix("status", "--python", venv.python).stderr) == []  # no overlay, no warning

"""vllm-hotfix itself on Python 3.10, 3.12 and 3.13 (the suite runs on 3.11): the real wheel of this
project installed with pip into a fresh venv of each interpreter, then the main job on a real vLLM
0.30.0 install: apply the catalog hotfix, verify, roll back, audit clean."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import realdata

pytestmark = pytest.mark.real

VERSIONS = ("3.10", "3.12", "3.13")
MAMBA = "mamba-align-block-size"


@pytest.fixture(scope="module")
def project_wheel(tmp_path_factory) -> Path:
    return realdata.build_project_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.parametrize("version", VERSIONS)
def test_main_job_runs_on_every_supported_python(version, project_wheel, vllm_install, tmp_path):
    python = realdata.find_python(version)
    if python is None:
        if os.environ.get("CI"):
            pytest.fail(f"python{version} is missing on the CI machine")
        pytest.skip(f"python{version} is not installed here")
    venv = tmp_path / f"hotfix-py{version}"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(project_wheel)], check=True)
    target = vllm_install("0.30.0")

    def hotfix(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "hotfix"), *args], capture_output=True, text=True, timeout=300)

    assert hotfix("--version").returncode == 0
    assert MAMBA in {entry["id"] for entry in json.loads(hotfix("list", "--json").stdout)}
    py = str(target.python)
    where = json.loads(hotfix("where", "vllm", "--python", py, "--json").stdout)
    assert where["kind"] == "wheel" and where["version"] == "0.30.0"
    path = target.site_packages / "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
    pristine = path.read_bytes()
    applied = hotfix("apply", MAMBA, "--python", py)
    assert applied.returncode == 0, applied.stderr
    assert b"self._mamba_block_size" in path.read_bytes()
    assert hotfix("verify", MAMBA, "--python", py).returncode == 0
    assert hotfix("rollback", MAMBA, "--python", py).returncode == 0
    assert path.read_bytes() == pristine
    assert hotfix("audit", "vllm", "--python", py).returncode == 0

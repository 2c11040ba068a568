"""Issue 5 "Must show" on real vLLM wheels: the catalog's mamba-align-block-size applies, verifies and
rolls back byte-exactly on the lowest (0.25.0) and highest (0.31.0) published release of its declared
range and on 0.30.0, and is `fixed-upstream` on the fixing release (0.32.0)."""

from __future__ import annotations

import json
import zipfile

import pytest

pytestmark = pytest.mark.real

HOTFIX = "mamba-align-block-size"
TARGET_FILE = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
BUGGY_DIVISOR = "// self.cache_config.block_size"
FIX_TEXTS = ("def _mamba_block_size(self) -> int:", "// self._mamba_block_size")
EXIT_FIXED_UPSTREAM = 5


def wheel_bytes(wheel, member: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member)


def status_of(run_hotfix, python) -> dict:
    done = run_hotfix("status", HOTFIX, "--python", python, "--json")
    (entry,) = json.loads(done.stdout)
    return {"exit": done.returncode, **entry}


@pytest.mark.parametrize("version", ["0.25.0", "0.30.0", "0.31.0"])
def test_applies_verifies_and_rolls_back_on_real_wheel(version, vllm_install, vllm_wheel, run_hotfix):
    install = vllm_install(version)
    patched_file = install.site_packages / TARGET_FILE
    original = wheel_bytes(vllm_wheel(version), TARGET_FILE)
    assert patched_file.read_bytes() == original
    assert BUGGY_DIVISOR in original.decode()

    applied = run_hotfix("apply", HOTFIX, "--python", install.python)
    assert applied.returncode == 0, applied.stderr
    assert status_of(run_hotfix, install.python)["state"] == "applied"
    verified = run_hotfix("verify", "--python", install.python)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    text = patched_file.read_text()
    for fix_text in FIX_TEXTS:
        assert fix_text in text
    assert BUGGY_DIVISOR not in text

    rolled_back = run_hotfix("rollback", HOTFIX, "--python", install.python)
    assert rolled_back.returncode == 0, rolled_back.stderr
    audited = run_hotfix("audit", "vllm", "--python", install.python)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert patched_file.read_bytes() == original


def test_fixing_release_is_fixed_upstream_and_apply_refuses(vllm_install, vllm_wheel, run_hotfix):
    install = vllm_install("0.32.0")
    target_file = install.site_packages / TARGET_FILE
    original = wheel_bytes(vllm_wheel("0.32.0"), TARGET_FILE)
    upstream_source = original.decode()
    assert "mamba_block_size = self.cache_config.mamba_block_size" in upstream_source
    assert BUGGY_DIVISOR not in upstream_source

    status = status_of(run_hotfix, install.python)
    assert status["state"] == "fixed-upstream"
    assert status["exit"] == 0
    verified = run_hotfix("verify", HOTFIX, "--python", install.python)
    assert verified.returncode == 0, verified.stdout + verified.stderr

    for extra in (["--dry-run"], []):
        refused = run_hotfix("apply", HOTFIX, "--python", install.python, *extra)
        assert refused.returncode == EXIT_FIXED_UPSTREAM, refused.stderr
        error_lines = [line for line in refused.stderr.splitlines() if line.startswith("hotfix: error:")]
        assert len(error_lines) == 1 and "already contains the upstream fix" in error_lines[0]
        assert "Traceback" not in refused.stderr

    assert target_file.read_bytes() == original
    audited = run_hotfix("audit", "vllm", "--python", install.python)
    assert audited.returncode == 0, audited.stdout + audited.stderr

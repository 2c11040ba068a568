"""What a hotfix changes in code, as `status` shows it for a record of a real vLLM 0.30.0 install. (`status
--runtime` needs vLLM importable, torch and all: tests/test_guard_runtime_vllm.py.)"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.real

HOTFIX = "mamba-align-block-size"
PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


def test_status_names_the_functions_a_recorded_hotfix_changes(run_hotfix, vllm_install):
    venv = vllm_install("0.30.0")
    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    done = run_hotfix("status", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    assert (f"     code: {PATH}: MambaHybridModelState.add_request (method), MambaHybridModelState._mamba_block_size "
            "(method)") in done.stdout
    (entry,) = [e for e in json.loads(run_hotfix("status", "--python", venv.python, "--json").stdout) if e["id"] == HOTFIX]
    assert entry["code"] == {PATH: [{"name": "MambaHybridModelState.add_request", "kind": "method"},
                                    {"name": "MambaHybridModelState._mamba_block_size", "kind": "method"}]}


def test_status_runtime_is_refused_with_all_or_root(run_hotfix, tmp_path):
    done = run_hotfix("status", "--runtime", "--all")
    assert done.returncode == 2 and "--runtime looks at one interpreter" in done.stderr
    done = run_hotfix("status", "--lock", tmp_path / "hotfix.lock")
    assert done.returncode == 2

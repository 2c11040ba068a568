"""`hotfix status --vex` on a real vLLM 0.30.0 install: mamba-align-block-size (upstream issue vllm#53142) is
`affected` before apply and `fixed` after it, the statement naming the hotfix and the fingerprint `status
--json` prints; every document is valid against the OpenVEX JSON schema (openvex/spec, checked by
check-jsonschema)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_hotfix.commands.status_vex import issue_name

SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "openvex" / "openvex_json_schema.json"
HOTFIX = "mamba-align-block-size"


def check_schema(document: Path) -> None:
    checker = shutil.which("check-jsonschema") or str(Path(sys.executable).with_name("check-jsonschema"))
    done = subprocess.run([checker, "--schemafile", str(SCHEMA), str(document)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_issue_names():
    assert issue_name("https://github.com/vllm-project/vllm/issues/53142") == "vllm-project/vllm#53142"
    assert issue_name("https://example.com/advisory/1") == "https://example.com/advisory/1"


@pytest.mark.real
@pytest.mark.tools
def test_vex_says_affected_then_fixed_with_the_hotfix_and_fingerprint(run_hotfix, vllm_install, tmp_path):
    venv = vllm_install("0.30.0")
    before = run_hotfix("status", HOTFIX, "--python", venv.python, "--vex")
    assert before.returncode == 0, before.stderr
    (tmp_path / "before.json").write_text(before.stdout)
    check_schema(tmp_path / "before.json")
    statement = json.loads(before.stdout)["statements"][0]
    assert statement["status"] == "affected" and f"hotfix apply {HOTFIX}" in statement["action_statement"]
    assert statement["vulnerability"]["name"] == "vllm-project/vllm#53142"
    assert statement["products"][0]["@id"] == "pkg:pypi/vllm@0.30.0"

    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    after = run_hotfix("status", "--python", venv.python, "--vex")
    assert after.returncode == 0, after.stderr
    (tmp_path / "after.json").write_text(after.stdout)
    check_schema(tmp_path / "after.json")
    doc = json.loads(after.stdout)
    fixed = [s for s in doc["statements"] if s["vulnerability"]["name"] == "vllm-project/vllm#53142"]
    assert len(fixed) == 1 and fixed[0]["status"] == "fixed"
    fingerprint = json.loads(run_hotfix("status", "--python", venv.python, "--json").stdout)[0]["fingerprint"]
    assert f"{HOTFIX}@1" in fixed[0]["impact_statement"] and fingerprint in fixed[0]["impact_statement"]
    assert doc["@context"] == "https://openvex.dev/ns/v0.2.0" and doc["@id"].startswith("https://openvex.dev/docs/")
    both = run_hotfix("status", "--python", venv.python, "--vex", "--json")
    assert both.returncode == 2


def test_no_statement_is_refused(run_hotfix, tmp_path):
    (tmp_path / "pkg").mkdir()
    refused = run_hotfix("status", "--root", tmp_path / "pkg", "--vex")
    assert refused.returncode in (2, 3), refused.stderr
    assert refused.stdout == ""

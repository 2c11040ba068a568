"""One verdict in every mode (issue 43, item 4), the code half: under HOTFIX_REQUIRE alone, the guard checks
the fixed functions of a real record (`hotfix apply` keeps their names) as it checks a lock's, under the
real vLLM 0.30.0 loader: a plugin that rebinds the fixed method is SHADOWED and strict mode stops the
process; a record from before the names were kept is `unknown`, and the command the guard prints records
them (no file changed) so the next process is in effect again. Nothing is written into the cached venv."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys

import pytest

from fixtures.rebinding import HOTFIX, MAMBA, code_lines, rebinding_setup, run_loader
from fixtures.vllmfull import record_setup, run

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

METHOD = "MambaHybridModelState.add_request"


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    full = rebinding_setup(tmp_path_factory.mktemp("record-code"))
    record_setup(full)  # a real `hotfix apply` of the catalog's hotfix to the patched copy
    return full


def state_file(full):
    (found,) = (full["work"] / "state" / "targets").glob("*/state.json")
    return found


def summary(proc) -> str:
    (line,) = [line for line in (proc.stdout + proc.stderr).splitlines()
               if "vllm-hotfix guard pid=" in line and "fingerprint=" in line and "role=MainProcess" not in line
               and " code " not in line and "role=main" in line]
    return line


def test_the_record_keeps_the_fixed_names_under_its_seal(full):
    (entry,) = json.loads(state_file(full).read_text())["series"]
    assert list(entry["code"]) == [MAMBA] and {"name": METHOD, "kind": "method"} in entry["code"][MAMBA], entry
    from vllm_hotfix_guard.txn.state import TargetState, seal_of

    state = TargetState.load(state_file(full).parent)
    assert entry["seal"] == seal_of(state.target, state.hotfixes[HOTFIX])


def test_a_plugin_rebinding_the_fixed_method_is_shadowed_under_require_alone_and_strict_stops(full):
    proc, reports = run_loader(full, after=["hotfix_test_class"], HOTFIX_LOCK="", HOTFIX_REQUIRE=HOTFIX)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    (after,) = [line for line in code_lines(proc.stdout) if "code after load_general_plugins():" in line]
    assert after.startswith("ERROR ") and f"{HOTFIX} vllm.v1.worker.gpu.model_states.mamba_hybrid:{METHOD} SHADOWED by " \
        "hotfix_test_class.add_request" in after, after
    strict, reports = run_loader(full, after=["hotfix_test_class"], HOTFIX_LOCK="", HOTFIX_REQUIRE=HOTFIX,
                                 HOTFIX_STRICT="1")
    assert strict.returncode != 0 and any(r.get("error") == "HotfixNotInEffect" for r in reports), strict.stdout
    calm, reports = run_loader(full, HOTFIX_LOCK="", HOTFIX_REQUIRE=HOTFIX, HOTFIX_STRICT="1")
    assert calm.returncode == 0 and all(r.get("ok") for r in reports if "role" in r), calm.stdout + calm.stderr
    assert not [line for line in code_lines(calm.stdout) if line.startswith("ERROR ")], calm.stdout


def test_a_record_from_before_the_names_is_unknown_and_the_printed_command_records_them(full):
    path = state_file(full)
    doc = json.loads(path.read_text())
    (entry,) = doc["series"]
    names = entry.pop("code")
    entry["seal"] = None  # as an older vllm-hotfix wrote it: a seal without the names would not match
    path.write_text(json.dumps(doc))
    proc, reports = run_loader(full, HOTFIX_LOCK="", HOTFIX_REQUIRE=HOTFIX, HOTFIX_STRICT="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and any(r.get("error") == "HotfixNotInEffect" for r in reports), out
    line = next(line for line in out.splitlines() if f"{HOTFIX} [require] NOT IN EFFECT: unknown: its record keeps "
                                                        "no code names" in line)
    command = line.split("record them with this version: `", 1)[1].split("`", 1)[0]
    argv = shlex.split(command)
    assert argv[:3] == ["hotfix", "apply", HOTFIX], command
    before = (full["patched"] / MAMBA).read_bytes()
    done = run(full, [sys.executable, "-m", "vllm_hotfix", *argv[1:]], pythonpath=[full["patched"]])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (full["patched"] / MAMBA).read_bytes() == before
    (entry,) = json.loads(path.read_text())["series"]
    assert entry["code"] == names and entry["seal"], entry
    again, reports = run_loader(full, HOTFIX_LOCK="", HOTFIX_REQUIRE=HOTFIX, HOTFIX_STRICT="1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{HOTFIX} [require] in effect" in again.stdout + again.stderr


def test_a_lock_from_before_the_names_is_unknown_not_in_effect_and_its_remedy_re_exports_them(full, tmp_path):
    """The lock's analogue: a lock without code names said "in effect" while a plugin rebound the fixed
    method (the code check had nothing to check). Now unknown in the guard's lock mode, strict stops, and the
    export command the guard prints, run as pasted, writes a lock whose names the guard checks: SHADOWED."""
    doc = json.loads(full["lock"].read_text())
    doc["hotfixes"] = [h for h in doc["hotfixes"] if h["id"] == HOTFIX]
    for f in doc["hotfixes"][0]["files"]:  # the file holds the catalog's fix (record_setup applied it)
        f.pop("code")
        f["sha256"] = hashlib.sha256((full["patched"] / f["path"]).read_bytes()).hexdigest()
    old = tmp_path / "hotfix.lock"
    old.write_text(json.dumps(doc))
    proc, reports = run_loader(full, after=["hotfix_test_class"], HOTFIX_LOCK=str(old), HOTFIX_STRICT="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and any(r.get("error") == "HotfixNotInEffect" for r in reports), out
    found = [line for line in out.splitlines() if f"{HOTFIX} [lock] NOT IN EFFECT: unknown: its lock keeps no code "
                                                    f"names for {MAMBA} (written by an older vllm-hotfix or by hand)" in line]
    assert found, out
    line = found[0]
    assert not code_lines(proc.stdout), proc.stdout  # nothing to check the live objects against
    command = line.split("re-export it (`", 1)[1].split("`", 1)[0]
    argv = shlex.split(command)
    assert argv[:5] == ["hotfix", "export", HOTFIX, "--to", "hotfix-export"] and "--python" in argv, command
    done = run(full, [sys.executable, "-m", "vllm_hotfix", *argv[1:]], pythonpath=[full["patched"]])
    assert done.returncode == 0, done.stdout + done.stderr
    new = full["work"] / "hotfix-export" / "hotfix.lock"
    (locked,) = json.loads(new.read_text())["hotfixes"][0]["files"]
    assert METHOD in {n["name"] for n in locked["code"]["names"]}, locked
    again, reports = run_loader(full, after=["hotfix_test_class"], HOTFIX_LOCK=str(new), HOTFIX_STRICT="1")
    assert again.returncode != 0 and any(r.get("error") == "HotfixNotInEffect" for r in reports), again.stdout
    assert any(f"{METHOD} SHADOWED by hotfix_test_class.add_request" in line for line in code_lines(again.stdout)), again.stdout

"""The guard's HOTFIX_REQUIRE under the real vLLM 0.30.0 loader: a real record of the patched copy
(`hotfix apply` through vLLM's own interpreter), judged by the verdict `hotfix status` gives (txn/judgement):
in effect; a record edited by hand is `unknown`; a stale ``.pyc`` of the patched module is
`stale-bytecode` (the process itself still compiles the source); a ``.pyc`` Python wrote itself is fine."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from fixtures.bytecode import stale_pyc
from fixtures.vllmfull import HOTFIX, MAMBA, MODULE, guard_setup, legit_pyc, loader, record_setup

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    full = guard_setup(tmp_path_factory.mktemp("vllm-full-record"))
    record_setup(full)
    return full


def summary(proc) -> str:
    (line,) = [line for line in (proc.stdout + proc.stderr).splitlines() if "fingerprint=" in line
               and "vllm-hotfix guard pid=" in line and "role=main" in line]
    return line


def state_file(full):
    (found,) = (full["work"] / "state" / "targets").glob("*/state.json")
    return found


def test_a_real_record_is_in_effect_and_status_gives_the_same_fingerprint(full, run_hotfix):
    proc, _ = loader(full, HOTFIX_REQUIRE=HOTFIX, HOTFIX_STRICT="1", IMPORT_PATCHED="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = summary(proc)
    assert f"{HOTFIX} [require] in effect" in line, line
    assert f"module {MODULE} from {full['patched'] / MAMBA}: the patched source of {HOTFIX}" in proc.stdout
    status = run_hotfix("status", "--python", full["venv"].python, "--json",
                        env={"HOTFIX_STATE_DIR": str(full["work"] / "state"), "PYTHONPATH": str(full["patched"])})
    (entry,) = [e for e in json.loads(status.stdout) if e["recorded"]]
    assert entry["state"] == "applied" and f"fingerprint={entry['fingerprint']}:" in line, (entry, line)


def test_a_hand_edited_record_is_unknown_and_strict_stops(full):
    saved = state_file(full).read_text()
    doc = json.loads(saved)
    doc["series"][0]["files"][0]["after_sha256"] = hashlib.sha256(b"a hand edit").hexdigest()
    state_file(full).write_text(json.dumps(doc))
    try:
        proc, _ = loader(full, HOTFIX_REQUIRE=HOTFIX, HOTFIX_STRICT="1")
    finally:
        state_file(full).write_text(saved)
    assert proc.returncode != 0
    assert f"{HOTFIX} [require] NOT IN EFFECT: unknown: the record does not describe the files: {HOTFIX}'s record " \
           "was changed after hotfix wrote it" in proc.stdout + proc.stderr
    assert "refusing to serve (HOTFIX_STRICT=1" in proc.stdout + proc.stderr


def test_stale_bytecode_is_reported_and_this_process_still_runs_the_source(full):
    source = full["patched"] / MAMBA
    pyc = stale_pyc(full["venv"].python, source, full["pristine"])
    try:
        proc, reports = loader(full, HOTFIX_REQUIRE=HOTFIX, IMPORT_PATCHED="1")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        line = summary(proc)
        assert f"{HOTFIX} [require] NOT IN EFFECT: stale-bytecode: the files hold the fix, but Python would load " \
               f"{pyc} instead of {source}" in line, line
        assert f"module {MODULE} from {source}: the patched source of {HOTFIX}" in proc.stdout  # compiled from source
        proc, _ = loader(full, HOTFIX_REQUIRE=HOTFIX, HOTFIX_STRICT="1")
        assert proc.returncode != 0 and "refusing to serve (HOTFIX_STRICT=1" in proc.stdout + proc.stderr
    finally:
        os.unlink(pyc)
    legit = legit_pyc(full)  # what a process without the guard writes: loaded by Python, the source's own code
    try:
        proc, _ = loader(full, HOTFIX_REQUIRE=HOTFIX, HOTFIX_STRICT="1", IMPORT_PATCHED="1")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{HOTFIX} [require] in effect" in summary(proc)
    finally:
        os.unlink(legit)

"""The guard with a trust policy under the real vLLM 0.30.0 (its own ``load_general_plugins()``, a forked and a
spawned EngineCore): strict mode stops a process that would run an unsigned or tampered lock; a lock signed by
real `minisign -S` keys passes; the first process verifies the signatures and the later ones reuse that verdict
(``PYTHONPROFILEIMPORTTIME``: no Ed25519 verifier imported there); a tampered cache entry is ignored.
Nothing is written into the cached venv (fixtures/vllmfull.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures.vllmfull import HOTFIX, guard_setup, loader

pytestmark = [pytest.mark.tools, pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

if shutil.which("minisign") is None:
    pytest.skip("minisign is not installed (apt-get install -y minisign)", allow_module_level=True)

VERIFIER = "vllm_hotfix_guard.core.ed25519"


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return guard_setup(tmp_path_factory.mktemp("vllm-full-trust"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    made = {}
    for name in ("release", "sre"):
        pub, key = directory / f"{name}.pub", directory / f"{name}.key"
        done = subprocess.run(["minisign", "-G", "-W", "-f", "-p", pub, "-s", key], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        text = pub.read_text().splitlines()
        made[name] = (text[1], key, text[0].split()[-1])  # the key line, the secret key, the key id as printed
    return made


@pytest.fixture
def signed(full, keys, tmp_path):
    """A copy of the lock in its own folder (its signature files beside it), a threshold-2 policy of both keys,
    a fresh ready directory; sign(*names) signs the lock with `minisign -S`."""
    lock = tmp_path / "lock" / "hotfix.lock"
    lock.parent.mkdir()
    data = json.loads(full["lock"].read_text())
    data["version"] = 3
    lock.write_text(json.dumps(data))
    policy = tmp_path / "trust.toml"
    policy.write_text("threshold = 2\nmin_version = 2\n" + "".join(
        f'[[keys]]\nname = "{name}"\nminisign = "{line}"\n' for name, (line, _, _) in keys.items()))
    ready = tmp_path / "ready"
    ready.mkdir()

    def sign(*names):
        for name in names:
            sig = lock.parent / ("hotfix.lock.minisig" if name == "release" else f"hotfix.lock.{keys[name][2]}.minisig")
            done = subprocess.run(["minisign", "-S", "-s", keys[name][1], "-m", lock, "-x", sig],
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr

    env = dict(HOTFIX_LOCK=str(lock), HOTFIX_TRUST=str(policy), HOTFIX_READY_DIR=str(ready), HOTFIX_STRICT="1")
    return {"lock": lock, "policy": policy, "ready": ready, "sign": sign, "env": env}


def guard_lines(proc) -> list[str]:
    """The guard's summary lines (its code check's own lines, of the lock's code names: test_guard_runtime_vllm.py)."""
    return [line for line in proc.stdout.splitlines() if "vllm-hotfix guard pid=" in line and ": code " not in line]


@pytest.mark.parametrize("case, words", [("unsigned", "UNSIGNED: "), ("tampered", "TAMPERED: ")])
def test_strict_stops_a_process_that_would_run_an_unsigned_or_tampered_lock(full, signed, case, words):
    if case == "tampered":
        signed["sign"]("release", "sre")
        lock = signed["lock"]
        lock.write_text(lock.read_text().replace('"version": 3', '"version": 30'))
    proc, reports = loader(full, **signed["env"])
    assert proc.returncode == 1 and "HotfixNotInEffect" in proc.stderr, proc.stdout + proc.stderr
    assert f"(trust): {words}" in proc.stderr and "refusing to serve (HOTFIX_STRICT=1" in proc.stderr
    (line,) = guard_lines(proc)
    assert line.startswith("ERROR ") and f"(trust) [lock] NOT IN EFFECT: {words}" in line, line
    assert HOTFIX not in line  # a refused lock is not checked further
    assert not list((signed["ready"] / "trust-verdicts").glob("*.json"))  # a refusal is never cached


def test_a_lock_signed_by_minisign_passes_and_later_processes_reuse_the_verdict(full, signed):
    signed["sign"]("release", "sre")  # minisign's default NAME.minisig and a NAME.<x>.minisig
    first, _ = loader(full, **signed["env"], PYTHONPROFILEIMPORTTIME="1")
    assert first.returncode == 0, first.stdout + first.stderr
    (line,) = guard_lines(first)
    assert "(trust) [lock] in effect (trusted: " in line and "signed by release, sre (2 of threshold 2), version 3" in line
    assert f"{HOTFIX} [lock] in effect" in line
    assert VERIFIER in first.stderr  # the first process verified the signatures
    proc, reports = loader(full, **signed["env"], CHILDREN="fork,spawn", PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["exitcode"] for r in reports if "child" in r] == [0, 0]
    lines = guard_lines(proc)
    assert len(lines) == 3 and all("(trust) [lock] in effect (trusted: verified by an earlier process" in x
                                   for x in lines), lines
    assert VERIFIER not in proc.stderr  # neither this process nor its spawned child imported the verifier


def test_a_tampered_cache_entry_is_ignored(full, signed):
    signed["sign"]("release", "sre")
    assert loader(full, **signed["env"])[0].returncode == 0
    (entry,) = (signed["ready"] / "trust-verdicts").glob("*.json")
    entry.write_text(entry.read_text().replace("trusted", "Trusted"))
    proc, _ = loader(full, **signed["env"], PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = guard_lines(proc)
    assert "signed by release, sre (2 of threshold 2)" in line and VERIFIER in proc.stderr  # verified again
    assert json.loads(entry.read_text())["verdict"] == "trusted"  # and the entry written anew


def test_a_lock_under_threshold_is_refused_and_a_valid_one_passes_with_strict(full, signed):
    signed["sign"]("release")
    proc, _ = loader(full, **signed["env"])
    assert proc.returncode == 1 and "(trust): UNTRUSTED: " in proc.stderr, proc.stdout + proc.stderr
    signed["sign"]("sre")
    assert loader(full, **signed["env"])[0].returncode == 0
    assert Path(signed["lock"]).read_text()  # the lock itself untouched by the guard

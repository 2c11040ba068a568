"""`status --runtime` asks the guard's own checks in the interpreter that runs vLLM (issue 45: it exited 0
on a stale ``.pyc`` of the pre-fix source and on a plugin holding a stale alias of the fixed function, which
`status` and the guard with a lock catch). Under the real vLLM 0.30.0 (torch and all): the ``.pyc`` is
the pre-fix compile with the patched source's mtime and size in its header (tests/fixtures/bytecode.py, as
the guard's own test has it: Python loads it); the plugin is a real ``vllm.general_plugins`` entry point
that took ``from ... import`` of the module before the fix. Both for a real record (`hotfix apply` through
vLLM's interpreter: HOTFIX_REQUIRE's rule, the record's names) and for a lock with code names. Each run
exits 1 naming the hotfix, with the advice; nothing is written; the advice runs as pasted."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.bytecode import stale_pyc
from fixtures.rebinding import HOTFIX, MAMBA, UTILS_HOTFIX, distribution, rebinding_setup, stale_source
from fixtures.vllmfull import guard_setup, record_setup

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

MODULE = "vllm.v1.worker.gpu.model_states.mamba_hybrid"
# the class taken from the module as it was before the fix (the image's own copy), at import time
STALE_CLASS = stale_source(MODULE, "MambaHybridModelState", "PRISTINE_MAMBA")


def runtime(full, *args, plugins=(), **env) -> subprocess.CompletedProcess:
    """`hotfix status --runtime --python <vLLM's interpreter>` with ``plugins`` (folders) on PYTHONPATH,
    VLLM_PLUGINS naming exactly them."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VLLM_")) and k != "VIRTUAL_ENV"}
    base.update(HOTFIX_STATE_DIR=str(full["work"] / "state"), VLLM_TARGET_DEVICE="cpu",
                VLLM_PLUGINS=",".join(Path(p).name for p in plugins), PRISTINE_UTILS=str(full["pristine_utils"])
                if "pristine_utils" in full else "", PRISTINE_MAMBA=str(full["pristine"]),
                PYTHONPATH=os.pathsep.join(map(str, [*plugins, full["patched"]])), **env)
    return subprocess.run([sys.executable, "-m", "vllm_hotfix", "status", "--runtime", "--python",
                           str(full["venv"].python), *args], capture_output=True, text=True, env=base, timeout=900)


def snapshot(full) -> dict:
    """The patched copy's real files and the state directory, byte for byte (links into the cache: their targets)."""
    out = {}
    for folder in (full["patched"] / "vllm" / "v1" / "worker", full["work"] / "state"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.name != "lock":
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def verdicts(done: subprocess.CompletedProcess) -> dict:
    doc = json.loads(done.stdout)
    return {(v["hotfix_id"], v["source"]): v for v in doc["verdicts"] if not v["in_effect"]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    full = guard_setup(tmp_path_factory.mktemp("runtime-record"))
    record_setup(full)
    full["stale_class"] = distribution(full["work"] / "plugins", "hotfix_test_stale_class", STALE_CLASS)
    return full


def test_a_record_with_a_stale_pyc_is_not_in_effect_and_the_advice_runs(recorded):
    clean = runtime(recorded, "--json")
    assert clean.returncode == 0 and verdicts(clean) == {}, clean.stdout + clean.stderr
    source = recorded["patched"] / MAMBA
    pyc = stale_pyc(recorded["venv"].python, source, recorded["pristine"])
    try:
        before = snapshot(recorded)
        done = runtime(recorded, "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        (bad,) = verdicts(done).values()
        assert (bad["hotfix_id"], bad["source"]) == (HOTFIX, "require")
        assert bad["detail"].startswith(f"stale-bytecode: the files hold the fix, but Python would load {pyc} "
                                        f"instead of {source}"), bad
        text = runtime(recorded)
        assert text.returncode == 1 and f"{HOTFIX} NOT IN EFFECT [require]: stale-bytecode" in text.stdout, text.stdout
        assert snapshot(recorded) == before  # status --runtime writes nothing
        (step,) = [part for part in bad["remedy"].split("`")[1::2]]
        assert step == f"hotfix apply {HOTFIX} --python {shlex.quote(str(recorded['venv'].python))}", step
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VLLM_")) and k != "VIRTUAL_ENV"}
        env.update(HOTFIX_STATE_DIR=str(recorded["work"] / "state"), PYTHONPATH=str(recorded["patched"]))
        applied = subprocess.run([sys.executable, "-m", "vllm_hotfix", *shlex.split(step)[1:]], capture_output=True,
                                 text=True, env=env, timeout=900)
        assert applied.returncode == 0 and not pyc.exists(), applied.stderr
        assert runtime(recorded).returncode == 0
    finally:
        pyc.unlink(missing_ok=True)


def test_a_record_and_a_plugin_holding_the_class_from_before_the_fix(recorded):
    before = snapshot(recorded)
    done = runtime(recorded, "--json", plugins=[recorded["stale_class"]])
    assert done.returncode == 1, done.stdout + done.stderr
    (bad,) = verdicts(done).values()
    assert (bad["hotfix_id"], bad["source"]) == (HOTFIX, "code"), bad
    assert bad["detail"].startswith("stale-alias: MambaHybridModelState.add_request held by hotfix_test_stale_class "
                                    f"({recorded['stale_class'] / 'hotfix_test_stale_class.py'}:10)"), bad
    assert str(recorded["pristine"]) in bad["detail"] and "import it after the fixed module" in bad["remedy"], bad
    text = runtime(recorded, plugins=[recorded["stale_class"]])
    assert text.returncode == 1 and f"{HOTFIX} NOT IN EFFECT [code]: stale-alias" in text.stdout, text.stdout
    assert snapshot(recorded) == before


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    return rebinding_setup(tmp_path_factory.mktemp("runtime-lock"))


def test_a_lock_with_a_stale_pyc_and_a_stale_alias(locked):
    lock = ("--lock", str(locked["lock"]))
    clean = runtime(locked, *lock, "--json")
    assert clean.returncode == 0 and verdicts(clean) == {}, clean.stdout + clean.stderr
    before = snapshot(locked)
    done = runtime(locked, *lock, "--json", plugins=[locked["plugins"]["hotfix_test_stale"]])
    assert done.returncode == 1, done.stdout + done.stderr
    (bad,) = verdicts(done).values()
    assert (bad["hotfix_id"], bad["source"]) == (UTILS_HOTFIX, "code"), bad
    assert bad["detail"].startswith("stale-alias: get_mamba_groups held by hotfix_test_stale"), bad
    source = locked["patched"] / MAMBA
    pyc = stale_pyc(locked["venv"].python, source, locked["pristine"])
    try:
        done = runtime(locked, *lock, "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        (bad,) = verdicts(done).values()
        assert (bad["hotfix_id"], bad["source"]) == (HOTFIX, "lock"), bad
        assert bad["detail"].startswith(f"stale-bytecode: the files hold the fix, but Python would load {pyc}"), bad
        assert "remove those __pycache__ entries" in bad["remedy"], bad
    finally:
        pyc.unlink()
    assert snapshot(locked) == before

"""The fixed function is the one running, under the real vLLM 0.30.0 (torch and all): plugins installed as
real ``vllm.general_plugins`` / ``vllm.platform_plugins`` entry points that rebind fixed functions, vLLM's
own ``load_general_plugins()``, ``EngineArgs.create_engine_config`` (the platform's
``pre_register_and_update``), ``WorkerWrapperBase.init_worker`` / ``init_device`` and ``VllmBackend``,
in the main process and in engine-core children started by fork and by spawn
(tests/fixtures/rebinding.py). Nothing here writes into the cached venv."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from fixtures.rebinding import HOTFIX, MAMBA, PLATFORM, PLUGINS, UTILS_HOTFIX, code_lines, rebinding_setup, run_loader

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

MODULE = "vllm.v1.worker.gpu.model_states.mamba_hybrid"
UTILS = "vllm.v1.worker.mamba_utils"


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return rebinding_setup(tmp_path_factory.mktemp("rebinding"))


def at(full, plugin: str, text: str) -> str:
    """FILE:LINE of the first line of ``plugin``'s module that starts with ``text``."""
    path = full["plugins"].get(plugin, full["platform"]) / f"{plugin}.py"
    lines = path.read_text().splitlines()
    return f"{path}:{next(i for i, line in enumerate(lines, 1) if line.strip().startswith(text))}"


def part(line: str, hotfix: str, name: str) -> str:
    """The part of a code line about one name (up to the next one, or the advice)."""
    found = re.search(rf"{re.escape(hotfix)} {re.escape(name)} (.*?)(?:; (?:{HOTFIX}|{UTILS_HOTFIX}) | -> |$)", line)
    assert found, (name, line)
    return found.group(1)


def test_plugins_after_the_guard_are_named_in_every_process_and_stopped_in_strict_children(full):
    """All plugins come after the guard on the path: vLLM imports their modules, then calls the guard, then
    them; the check after the loop (and the watch, for a module attribute) sees each one."""
    proc, reports = run_loader(full, after=list(PLUGINS), CHILDREN="fork,spawn", CHILD_STRICT="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    main = next(r for r in reports if r.get("role") == "MainProcess")
    assert main.get("ok"), main
    pid = main["pid"]
    (after,) = [line for line in code_lines(proc.stdout) if f"pid={pid} " in line and "code after load_general_plugins():" in line]
    print(after)
    assert after.startswith("ERROR ")
    assert part(after, HOTFIX, f"{MODULE}:MambaHybridModelState.add_request") == \
        f"SHADOWED by hotfix_test_class.add_request ({at(full, 'hotfix_test_class', 'def add_request')})"
    assert part(after, UTILS_HOTFIX, f"{UTILS}:batch_memcpy") == \
        f"SHADOWED by hotfix_test_module.batch_memcpy ({at(full, 'hotfix_test_module', 'def batch_memcpy')})"
    assert part(after, UTILS_HOTFIX, f"{UTILS}:get_mamba_group_ids") == \
        f"SHADOWED by its __code__ replaced by hotfix_test_code._sorted_ids ({at(full, 'hotfix_test_code', 'def _sorted_ids')})"
    assert part(after, UTILS_HOTFIX, f"{UTILS}:_get_mamba_spec_for_layer") == (
        f"wrapped by hotfix_test_wrapper.register.<locals>.traced ({at(full, 'hotfix_test_wrapper', '@functools.wraps')}), "
        "which calls the fixed code through __wrapped__")
    stale = f"{UTILS_HOTFIX} {UTILS}:get_mamba_groups STALE-ALIAS: hotfix_test_stale " \
            f"({at(full, 'hotfix_test_stale', 'from vllm.v1.worker.mamba_utils import')}) holds " \
            f"{UTILS}.get_mamba_groups ({full['pristine_utils']}:"
    assert stale in after
    assert "preprocess_state" not in after  # the unrelated rebinding changes nothing
    watched = [line for line in code_lines(proc.stdout) if f"pid={pid} " in line and " rebound batch_memcpy:" in line]
    assert len(watched) == 1 and f"code when hotfix_test_module ({at(full, 'hotfix_test_module', 'mamba_utils.batch_memcpy =')}) " \
        "rebound batch_memcpy" in watched[0]  # seen as it happened (3.11: the module's __setattr__), with the caller

    assert {r["child"]: r["exitcode"] for r in reports if "child" in r} == {"fork": 1, "spawn": 1}
    forked = [line for line in out.splitlines() if ", EngineCore_fork), refusing to serve" in line]
    assert forked, out  # the fork hook: the child inherits the rebindings; strict ends it, naming each
    for culprit in ("hotfix_test_class.add_request", "hotfix_test_module.batch_memcpy", "hotfix_test_code._sorted_ids",
                    "get_mamba_groups held by hotfix_test_stale"):
        assert culprit in forked[0], (culprit, forked[0])
    spawned = next(r for r in reports if r.get("role") == "EngineCore_spawn")
    assert spawned["error"] == "HotfixNotInEffect"  # through vLLM's loader: the rebinding refused as it happened
    assert "when hotfix_test_module (" in spawned["message"] and "refusing to serve (HOTFIX_STRICT=1" in spawned["message"]


def test_a_plugin_before_the_guard_is_judged_as_the_guard_starts_and_strict_stops_there(full):
    """A plugin ahead of the guard imports and rebinds before the guard runs: the module was not compiled by
    the import watch, so the lock's fingerprints (same interpreter) judge it."""
    proc, reports = run_loader(full, before=["hotfix_test_class"], HOTFIX_STRICT="1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (report,) = reports
    assert report["error"] == "HotfixNotInEffect"
    culprit = f"hotfix_test_class.add_request ({at(full, 'hotfix_test_class', 'def add_request')})"
    assert f"{HOTFIX}: shadowed: MambaHybridModelState.add_request by {culprit}" in report["message"]
    summary = next(line for line in proc.stdout.splitlines() if "fingerprint=hf1-" in line)
    assert f"{HOTFIX} [code] NOT IN EFFECT: shadowed: MambaHybridModelState.add_request by {culprit}" in summary
    assert f"{UTILS_HOTFIX} [import]" not in summary  # imported early too, but every locked name proven: no "unknown"


def test_a_wrapper_and_an_unrelated_rebinding_stop_nothing(full):
    proc, reports = run_loader(full, after=["hotfix_test_wrapper", "hotfix_test_unrelated"], CHILDREN="fork,spawn",
                               HOTFIX_STRICT="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r.get("ok") or r.get("exitcode") for r in reports] == [True, True, 0, True, 0]
    lines = code_lines(proc.stdout)
    print("\n".join(lines))
    assert all(line.startswith("INFO ") for line in lines)
    roles = {re.search(r"role=([^:\s]+)", line).group(1): line for line in lines}
    assert set(roles) == {"main", "EngineCore_fork", "EngineCore_spawn"}
    for line in roles.values():
        assert f"{UTILS_HOTFIX} {UTILS}:_get_mamba_spec_for_layer wrapped by hotfix_test_wrapper." in line
        assert f"{HOTFIX} {MODULE}:MambaHybridModelState.add_request in effect" in line


def test_the_platform_and_worker_patch_points_and_the_compile_cache(full, tmp_path):
    """vLLM's own create_engine_config (the platform's pre_register_and_update patches), init_worker /
    init_device (the worker's __init__ patches), then VllmBackend deciding its compile cache with the fixed
    file among the traced files: keyed by the code, and in a pinned cache_dir whose graphs are older."""
    pinned = tmp_path / "pinned"
    (pinned / "rank_0_0" / "backbone").mkdir(parents=True)
    (pinned / "rank_0_0" / "backbone" / "cache_key_factors.json").write_text(json.dumps({"code_hash": "0" * 64}))
    proc, reports = run_loader(full, after=[PLATFORM], script="points.py", VLLM_TARGET_DEVICE="", COMPILE="1",
                               PINNED_CACHE=str(pinned), TRACED=str(full["patched"] / MAMBA),
                               VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = reports
    assert report["platform"] == "TestPlatform" and report["checkpoints"] == [True, True]
    lines = code_lines(proc.stdout)
    print("\n".join(lines))
    platform = [line for line in lines if "code after the platform's pre_register_and_update" in line]
    assert f"{MODULE}:MambaHybridModelState.add_request SHADOWED by hotfix_test_platform.add_request" in platform[0]
    worker = [line for line in lines if "code after the worker's init (WorkerWrapperBase.init_device)" in line]
    assert f"{UTILS}:batch_memcpy SHADOWED by hotfix_test_platform.batch_memcpy" in worker[0]
    assert f"{MODULE}:MambaHybridModelState.add_request SHADOWED" in worker[0]
    compiled = [line for line in proc.stdout.splitlines() if ": compile cache (backbone): " in line]
    assert len(compiled) == 2, proc.stdout
    assert compiled[0].startswith("INFO ") and f"{HOTFIX} {full['patched'] / MAMBA} traced; the cache directory is " \
        "keyed by the traced code" in compiled[0]
    assert compiled[1].startswith("ERROR ") and f"the pinned compilation_config.cache_dir {pinned} holds graphs " \
        "compiled from other code (code hash 000000000000" in compiled[1]


def test_status_runtime_names_the_rebindings_that_touch_a_hotfix(full):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VLLM_"))}
    folders = [full["plugins"][n] for n in ("hotfix_test_class", "hotfix_test_module", "hotfix_test_unrelated")]
    env.update(PYTHONPATH=os.pathsep.join(map(str, folders + [full["platform"], full["patched"]])), VLLM_TARGET_DEVICE="",
               VLLM_PLUGINS="hotfix_test_class,hotfix_test_module,hotfix_test_unrelated,hotfix_test_platform",
               HOTFIX_STATE_DIR=str(full["work"] / "state"))
    done = subprocess.run([sys.executable, "-m", "vllm_hotfix", "status", "--runtime", "--python", str(full["venv"].python),
                           "--lock", str(full["lock"])], capture_output=True, text=True, env=env, timeout=900)
    print(done.stdout)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("platform hotfix_test_platform.TestPlatform")
    assert (f"  {MODULE}:MambaHybridModelState.add_request -> hotfix_test_class.add_request "
            f"({at(full, 'hotfix_test_class', 'def add_request')}) [general plugins]  TOUCHES {HOTFIX}") in lines
    assert (f"  {UTILS}:batch_memcpy -> hotfix_test_module.batch_memcpy ({at(full, 'hotfix_test_module', 'def batch_memcpy')}) "
            f"[general plugins]  TOUCHES {UTILS_HOTFIX}") in lines
    assert (f"  {MODULE}:MambaHybridModelState.add_request -> hotfix_test_platform.add_request "
            f"({at(full, PLATFORM, 'def add_request')}) [platform pre_register_and_update]  TOUCHES {HOTFIX}") in lines
    unrelated = [line for line in lines if "preprocess_state" in line]
    assert len(unrelated) == 1 and "TOUCHES" not in unrelated[0]
    assert "4 rebinding(s) of vLLM functions, 3 touching a hotfix (5 fixed name(s) of 2 hotfix(es) checked)" in lines

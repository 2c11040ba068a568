"""The guard under the real vLLM 0.30.0 with all its dependencies (torch from PyPI): vLLM's own
``load_general_plugins()`` (with its per-process ``plugins_loaded`` flag), its logging, its CLI, and
multiprocessing children started by fork and by spawn.

Nothing here modifies the cached venv (realdata.vllm_full_venv): vllm-hotfix is pip-installed
(--target) into a folder put on PYTHONPATH, and the "patched install" is a symlink farm of the cached
``vllm`` package on PYTHONPATH in which the patched file is a real file of our own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import realdata

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
MODULE = "vllm.v1.worker.gpu.model_states.mamba_hybrid"
HOTFIX = "mamba-align-block-size"
OLD, NEW = b"- 1) // self.cache_config.block_size", b"- 1) // self.cache_config.mamba_block_size"
# vLLM's log format: "INFO 11-30 22:49:06 [guard.py:227] text"
VLLM_LINE = re.compile(r"^(INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[guard(_imports)?\.py:\d+\] vllm-hotfix guard ")

# Run with the real vLLM: the real loader in the main process, then in a forked and/or a spawned child
# (as vLLM starts EngineCore / workers); REVERT: put the pristine file back after the parent checked.
LOADER = r'''
import json, os, sys, time
import multiprocessing as mp
import vllm.plugins
from vllm.plugins import load_general_plugins

guard_seconds = []
real_group_loader = vllm.plugins.load_plugins_by_group


def timed_group(group):  # vLLM's own loader; only the guard's call is timed
    plugins = real_group_loader(group)
    if "vllm_hotfix_guard" in plugins:
        func = plugins["vllm_hotfix_guard"]

        def timed():
            start = time.perf_counter()
            try:
                func()
            finally:
                guard_seconds.append(time.perf_counter() - start)
        plugins["vllm_hotfix_guard"] = timed
    return plugins


vllm.plugins.load_plugins_by_group = timed_group


def work():
    load_general_plugins()
    if os.environ.get("IMPORT_PATCHED"):
        import vllm.v1.worker.gpu.model_states.mamba_hybrid as module
        print(json.dumps({"pid": os.getpid(), "module_file": module.__file__}), flush=True)
    print(json.dumps({"pid": os.getpid(), "guard_seconds": guard_seconds}), flush=True)
    guard_seconds.clear()  # a forked child would inherit the parent's figure


def revert(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


if __name__ == "__main__":
    work()
    target = os.environ.get("REVERT")
    if target:
        patched = open(target, "rb").read()
        revert(target, open(os.environ["PRISTINE"], "rb").read())
    try:
        for method in filter(None, os.environ.get("CHILDREN", "").split(",")):
            child = mp.get_context(method).Process(name=f"EngineCore_{method}", target=work)
            child.start()
            child.join()
            print(json.dumps({"child": method, "exitcode": child.exitcode}), flush=True)
    finally:
        if target:
            revert(target, patched)
'''


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    venv = realdata.vllm_full_venv("0.30.0")
    work = tmp_path_factory.mktemp("vllm-full")
    wheel = realdata.build_project_wheel(work)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",  # with .pyc, as in an image
                    "-q", "--target", str(work / "hotfix"), str(wheel)], check=True)
    patched = work / "patched"
    patched.mkdir()
    subprocess.run(["cp", "-as", str(venv.site_packages / "vllm"), str(patched / "vllm")], check=True)
    shutil.copytree(venv.site_packages / "vllm-0.30.0.dist-info", patched / "vllm-0.30.0.dist-info")
    pristine = (venv.site_packages / MAMBA).read_bytes()
    assert pristine.count(OLD) == 1
    target = patched / MAMBA
    target.unlink()  # a symlink into the cache: replace it, never write through it
    target.write_bytes(pristine.replace(OLD, NEW))
    lock = work / "hotfix.lock"
    lock.write_text(json.dumps({
        "schema": 1, "generator": "test", "site_packages": str(patched),
        "hotfixes": [{"id": HOTFIX, "version": 1, "distribution": "vllm", "package": "vllm", "baseline_version": "0.30.0",
                      "fixed_in": None, "files": [{"path": MAMBA, "sha256": sha256(target.read_bytes()),
                                                   "baseline_sha256": sha256(pristine), "export": f"{HOTFIX}/{MAMBA}"}]}],
    }))
    (work / "loader.py").write_text(LOADER)
    return {"venv": venv, "work": work, "hotfix": work / "hotfix", "patched": patched, "lock": lock,
            "pristine": venv.site_packages / MAMBA}


def run(full, argv, *, pythonpath=None, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VLLM_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    base.update(VLLM_TARGET_DEVICE="cpu", HOTFIX_STATE_DIR=str(full["work"] / "state"),
                PYTHONPATH=os.pathsep.join(map(str, pythonpath or [full["hotfix"], full["patched"]])))
    base.update(env)
    return subprocess.run(argv, capture_output=True, text=True, env=base, cwd=full["work"], timeout=900)


def loader(full, **kw) -> tuple[subprocess.CompletedProcess, list[dict]]:
    proc = run(full, [str(full["venv"].python), str(full["work"] / "loader.py")], **kw)
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, reports


def guard_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "vllm-hotfix guard " in line and "Traceback" not in line]


def test_real_loader_checks_main_forked_and_spawned_once_each_in_vllm_format(full):
    proc, reports = loader(full, HOTFIX_LOCK=str(full["lock"]), HOTFIX_STRICT="1", CHILDREN="fork,spawn", IMPORT_PATCHED="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["exitcode"] for r in reports if "child" in r] == [0, 0]
    lines = guard_lines(proc.stdout)  # vLLM's handler writes to stdout
    print("\n".join(lines))
    summaries = [line for line in lines if f"{HOTFIX} [lock] in effect" in line]
    roles = [re.search(r"role=([^:\s]+)", line).group(1) for line in summaries]
    assert roles == ["main", "EngineCore_fork", "EngineCore_spawn"], lines
    assert all(VLLM_LINE.match(line) and line.startswith("INFO ") for line in lines), lines
    loaded = full["patched"] / MAMBA
    modules = [line for line in lines if f"module {MODULE} from {loaded}: the patched source of {HOTFIX}" in line]
    assert len(modules) == 2, lines  # main and spawned child import it; the forked child inherits the checked module
    costs = [r["guard_seconds"] for r in reports if "guard_seconds" in r]
    assert [len(c) for c in costs] == [1, 0, 1]  # the forked child: vLLM never calls the plugin (plugins_loaded)
    print(f"guard cost under vLLM's loader: main {costs[0][0] * 1e3:.1f} ms, spawned {costs[2][0] * 1e3:.1f} ms")


def test_strict_stops_forked_and_spawned_children_when_the_file_is_reverted_after_the_parent_checked(full):
    proc, reports = loader(full, HOTFIX_LOCK=str(full["lock"]), HOTFIX_STRICT="1", CHILDREN="fork,spawn",
                           REVERT=str(full["patched"] / MAMBA), PRISTINE=str(full["pristine"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [(r["child"], r["exitcode"]) for r in reports if "child" in r] == [("fork", 1), ("spawn", 1)]
    out = proc.stdout + proc.stderr
    for role in ("EngineCore_fork", "EngineCore_spawn"):
        assert re.search(rf"role={role} fingerprint=hf1-\w+: {HOTFIX} \[lock\] NOT IN EFFECT: lost: \S+mamba_hybrid.py has sha256 \w+ "
                         rf"\(the unpatched original\)", out), out
    assert "refusing to serve (HOTFIX_STRICT=1" in out
    assert "HotfixNotInEffect" in proc.stderr  # the spawned child: raised through vLLM's loader


@pytest.mark.parametrize("args", [["--version"], ["serve", "--help"]], ids=["version", "serve-help"])
def test_vllm_commands_that_serve_nothing_warn_and_exit_0_under_strict(full, args):
    proc = run(full, [str(full["venv"].root / "bin" / "vllm"), *args], HOTFIX_REQUIRE="never-applied", HOTFIX_STRICT="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if args == ["--version"]:
        assert proc.stdout.splitlines()[-1] == "0.30.0"
    assert guard_lines(proc.stdout) == []  # nothing of ours mixed into the command's output
    lines = guard_lines(proc.stderr)
    print("\n".join(lines))
    assert all(VLLM_LINE.match(line) and line.startswith("WARNING ") for line in lines), lines
    assert "never-applied [require] NOT IN EFFECT: not-applied: no record of applying it in " in lines[0]
    assert "-> apply it (`hotfix apply never-applied`)" in lines[0]
    assert f"not stopping `vllm {' '.join(args)}` (HOTFIX_STRICT=1): it serves nothing" in lines[1]


def test_without_vllm_logging_the_guard_still_says_it(full):
    proc, _ = loader(full, HOTFIX_LOCK=str(full["lock"]), VLLM_CONFIGURE_LOGGING="0")
    assert proc.returncode == 0, proc.stderr
    (line,) = guard_lines(proc.stderr)
    print(line)
    assert re.match(rf"^INFO \d\d-\d\d \d\d:\d\d:\d\d \[vllm-hotfix guard\] vllm-hotfix guard pid=\d+ role=main "
                    rf"\(loader.py\) fingerprint=hf1-\w+: {HOTFIX} \[lock\] in effect$", line)


def test_a_pristine_copy_first_on_sys_path_is_named_with_the_module_and_strict_stops(full):
    pristine_first = [full["hotfix"], full["venv"].site_packages, full["patched"]]
    proc, reports = loader(full, pythonpath=pristine_first, HOTFIX_LOCK=str(full["lock"]), IMPORT_PATCHED="1")
    assert proc.returncode == 0, proc.stderr
    (report,) = [r for r in reports if "module_file" in r]
    assert report["module_file"] == str(full["pristine"])
    lines = guard_lines(proc.stdout)
    print("\n".join(lines))
    assert any(line.startswith("ERROR ") and f"{HOTFIX} [lock] NOT IN EFFECT: lost: {full['pristine']} has sha256" in line
               for line in lines), lines
    assert any(line.startswith("ERROR ") and f"module {MODULE} from {full['pristine']}: {HOTFIX} NOT IN EFFECT: "
               f"sha256 " in line and ", expected the patched " in line for line in lines), lines

    proc, reports = loader(full, pythonpath=pristine_first, HOTFIX_LOCK=str(full["lock"]), IMPORT_PATCHED="1", HOTFIX_STRICT="1")
    assert proc.returncode == 1 and not [r for r in reports if "module_file" in r]
    assert "HotfixNotInEffect" in proc.stderr and str(full["pristine"]) in proc.stderr

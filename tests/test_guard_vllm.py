"""The guard under the real vLLM 0.30.0 with all its dependencies (torch from PyPI): vLLM's own
``load_general_plugins()`` (with its per-process ``plugins_loaded`` flag), its logging, its CLI, and
multiprocessing children started by fork and by spawn.

Nothing here modifies the cached venv (realdata.vllm_full_venv): vllm-hotfix is pip-installed
(--target) into a folder put on PYTHONPATH, and the "patched install" is a symlink farm of the cached
``vllm`` package on PYTHONPATH in which the patched file is a real file of our own.
"""

from __future__ import annotations

import re

import pytest

from fixtures.vllmfull import HOTFIX, MAMBA, MODULE, guard_setup, loader, run

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

# vLLM's log format: "INFO 11-30 22:49:06 [plugin.py:227] text" (the guard module that logged)
VLLM_LINE = re.compile(r"^(INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[(plugin|imports|code)\.py:\d+\] vllm-hotfix guard ")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return guard_setup(tmp_path_factory.mktemp("vllm-full"))


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
    assert "-> apply it (hotfix apply never-applied --python " in lines[0]  # the interpreter of this process
    assert "--catalog DIR (the catalog that has it))" in lines[0]  # an id no catalog here knows: the form to complete
    assert f"not stopping `vllm {' '.join(args)}` (HOTFIX_STRICT=1): it serves nothing" in lines[1]


def test_without_vllm_logging_the_guard_still_says_it(full):
    proc, _ = loader(full, HOTFIX_LOCK=str(full["lock"]), VLLM_CONFIGURE_LOGGING="0")
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in guard_lines(proc.stderr) if ": code " not in line]  # the code check's: its own line
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


def test_a_worker_forked_from_an_engine_core_is_named_after_itself_not_its_parent(full):
    """vLLM forks its workers from the engine core (not from the main process): in the fork hook,
    multiprocessing's current_process() is still the engine core, so the role must come from the
    Process being started (issue 24 item 8)."""
    proc, reports = loader(full, HOTFIX_LOCK=str(full["lock"]), CHILDREN="fork,spawn", WORKERS="os.fork")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {r["worker_of"]: r for r in reports if "worker_of" in r}
    bare = {r["bare_fork_of"]: r["pid"] for r in reports if "bare_fork_of" in r}
    assert set(workers) == set(bare) == {"EngineCore_fork", "EngineCore_spawn"}
    assert all(w["exitcode"] == 0 for w in workers.values())
    summaries = {int(m.group(1)): m.group(2) for line in guard_lines(proc.stdout)
                 if (m := re.search(r"guard pid=(\d+) role=(.+?) fingerprint=hf1-\w+: " + HOTFIX, line))}
    print("\n".join(f"pid={pid} role={role}" for pid, role in summaries.items()))
    for parent, worker in workers.items():
        assert summaries[worker["pid"]] == "Worker_TP0", (parent, summaries)
        assert summaries[bare[parent]] == f"fork of {parent}", (parent, summaries)
    assert sorted(summaries.values()).count("EngineCore_fork") == 1 and list(summaries.values()).count("EngineCore_spawn") == 1


def hostile_locks(where) -> dict:
    """Lock paths nobody should be able to hang, flood or steer the guard with (issue 21)."""
    import json
    import os

    fifo = where / "fifo.lock"
    os.mkfifo(fifo)
    big = where / "big.lock"
    with open(big, "wb") as fh:  # 85 MB: past the cap, never parsed
        fh.write(b'{"schema": 1, "site_packages": "/x", "hotfixes": [' + b" " * (85 << 20) + b"]}")
    steer = where / "steer.lock"
    steer.write_text(json.dumps({"schema": 1, "site_packages": "/x", "hotfixes": [
        {"id": "x", "version": 1, "distribution": "vllm", "package": "this.x", "baseline_version": "0.30.0",
         "fixed_in": None, "files": []}]}))
    return {"fifo": fifo, "zero": "/dev/zero", "big": big, "package this.x": steer}


@pytest.mark.parametrize("kind", ["fifo", "zero", "big", "package this.x"])
def test_a_hostile_lock_is_one_line_never_a_hang_an_import_or_a_pass(full, tmp_path, kind):
    import time

    lock = hostile_locks(tmp_path)[kind]
    start = time.monotonic()
    proc, _ = loader(full, HOTFIX_LOCK=str(lock))
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out  # without strict mode it keeps serving
    (line,) = [line for line in guard_lines(proc.stdout + proc.stderr) if "(lock) [lock] NOT IN EFFECT" in line]
    assert "Beautiful is better than ugly" not in out  # `this` (the Zen of Python) was never imported
    proc, _ = loader(full, HOTFIX_LOCK=str(lock), HOTFIX_STRICT="1")
    assert proc.returncode == 1 and "HotfixNotInEffect" in proc.stderr  # strict: fails closed
    print(f"{kind}: one line, the process went on after {took:.2f} s in all (interpreter and vLLM import included)")

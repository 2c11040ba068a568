"""The in-process guard, loaded and called exactly as vLLM's plugin loader does, in real processes.

Target: a private copy of a real vLLM 0.30.0 install, with vllm-hotfix pip-installed (from a wheel
built from this tree) next to it. The hotfixes are "applied" here by writing the patched files and
the state.json / hotfix.lock the apply and export commands write (formats: docs/design.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

import realdata
from vllm_hotfix_guard.paths import TargetDir

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
# id -> (file, old bytes, new bytes); the first is the real upstream fix (seed 001)
HOTFIXES = {
    "mamba-align-block-size": (MAMBA, b"- 1) // self.cache_config.block_size", b"- 1) // self.cache_config.mamba_block_size"),
    "scheduler-note": ("vllm/v1/core/sched/scheduler.py", b"", b"# hotfix: scheduler-note\n"),
    "mamba-utils-note": ("vllm/model_executor/layers/mamba/mamba_utils.py", b"", b"# hotfix: mamba-utils-note\n"),
}
LOST = "cache-config-note"  # recorded as applied, but the file is the pristine original (a rebuild)
LOST_FILE = "vllm/config/cache.py"
APPLIED = ",".join(HOTFIXES)

# What vllm/plugins/__init__.py (0.30.0) does for the group vllm.general_plugins (its plugins_loaded flag
# included), minus `import vllm` (no torch here; tests/test_guard_vllm.py runs the real one); plus vLLM's logging set-up (a handler on the "vllm" logger, INFO, no propagation).
HARNESS = r'''
import json, logging, os, sys, time
before = set(sys.modules)
from importlib.metadata import entry_points

DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
handler = logging.StreamHandler(sys.stderr)
handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
vllm_logger = logging.getLogger("vllm")
vllm_logger.addHandler(handler)
vllm_logger.setLevel(logging.INFO)
vllm_logger.propagate = False
logger = logging.getLogger("vllm.plugins")
call_seconds = []


def load_plugins_by_group(group):
    allowed_plugins = None if "VLLM_PLUGINS" not in os.environ else os.environ["VLLM_PLUGINS"].split(",")
    discovered_plugins = entry_points(group=group)
    if len(discovered_plugins) == 0:
        return {}
    plugins = {}
    for plugin in discovered_plugins:
        if allowed_plugins is None or plugin.name in allowed_plugins:
            try:
                func = plugin.load()
                plugins[plugin.name] = func
            except Exception:
                logger.exception("Failed to load plugin %s", plugin.name)
    return plugins


plugins_loaded = False  # vLLM's per-process flag: a forked child inherits it and never calls the plugins


def load_general_plugins(times=1):
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    plugins = load_plugins_by_group(group=DEFAULT_PLUGINS_GROUP)
    for _ in range(times):  # a plugin must tolerate being called again in one process
        for func in plugins.values():
            start = time.perf_counter()
            func()
            call_seconds.append(time.perf_counter() - start)


def serve():
    load_general_plugins(int(os.environ.get("HARNESS_TIMES", "1")))
    new = sorted(set(sys.modules) - before)
    print(json.dumps({"pid": os.getpid(), "call_seconds": call_seconds, "new_modules": new}), flush=True)


def in_process(context, name):
    import multiprocessing
    child = multiprocessing.get_context(context).Process(name=name, target=serve)
    child.start()
    child.join()
    return child.exitcode


if __name__ == "__main__":
    role = os.environ.get("HARNESS_SPAWN")
    if role:
        sys.exit(1 if in_process("spawn", role) else 0)
    serve()
    if os.environ.get("HARNESS_FORK"):
        sys.exit(1 if in_process("fork", os.environ["HARNESS_FORK"]) else 0)
'''


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patch_file(site_packages: Path, relpath: str, old: bytes, new: bytes) -> dict:
    """Write the patched file; return its state.json file record (with the bytes, for its kept patch)."""
    path = site_packages / relpath
    before = path.read_bytes()
    after = before.replace(old, new, 1) if old else before + new
    assert after != before
    path.write_bytes(after)
    return file_record(relpath, before, after)


def file_record(relpath: str, before: bytes, after: bytes) -> dict:
    return {"path": relpath, "before_sha256": sha256(before), "after_sha256": sha256(after), "_bytes": (before, after)}


def kept_patch(record: dict) -> bytes:
    """A real `diff -u` of the record's before and after bytes: the patch `hotfix apply` would have kept."""
    import tempfile

    before, after = record["_bytes"]
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "a").write_bytes(before)
        (Path(work) / "b").write_bytes(after)
        done = subprocess.run(["diff", "-u", "--label", f"a/{record['path']}", "--label", f"b/{record['path']}",
                               str(Path(work) / "a"), str(Path(work) / "b")], capture_output=True)
    assert done.returncode == 1, done.stderr
    return done.stdout


def write_state(site_packages: Path, files_by_id: dict[str, list[dict]]) -> Path:
    """The record `hotfix apply` writes, as an older vllm-hotfix wrote it (schema 1, no seal): its kept
    patches really give the recorded bytes, as the guard derives them (txn/judgement). ``code``: the code
    names of each Python file, none kept here (the code check of a record: tests/test_guard_record_code.py;
    without the key the guard says unknown)."""
    directory = TargetDir.of(site_packages).directory
    directory.mkdir(parents=True, exist_ok=True)
    for hid, files in files_by_id.items():
        (directory / "patches" / hid).mkdir(parents=True, exist_ok=True)
        (directory / "patches" / hid / "1.patch").write_bytes(b"".join(kept_patch(f) for f in files))
    state = {
        "schema": 1,
        "target": {"root": str(site_packages), "package": "vllm", "distribution": "vllm", "version": "0.30.0", "kind": "wheel"},
        "hotfixes": {hid: {"version": 1, "applied_at": "2026-11-29T10:00:00Z", "source": "adhoc",
                           "patches": [f"patches/{hid}/1.patch"],
                           "files": [{k: v for k, v in f.items() if k != "_bytes"} for f in files],
                           "backups": f"backups/{hid}", "code": {}} for hid, files in files_by_id.items()},
    }
    (directory / "state.json").write_text(json.dumps(state))
    return directory / "state.json"


def write_lock(path: Path, site_packages: Path, files_by_id: dict[str, list[dict]], *, python=None) -> Path:
    """The lock `hotfix export` writes, with the code names of each file computed in ``python`` (the venv's
    interpreter); without ``python``, none: a lock written before they were locked."""
    from fixtures.codenames import code_of

    def code(f: dict) -> dict:
        return {"code": code_of(f["path"], *f["_bytes"], python=python)} if python else {}

    lock = {
        "schema": 1, "generator": "vllm-hotfix 0.1.0", "site_packages": str(site_packages),
        "hotfixes": [{"id": hid, "version": 1, "distribution": "vllm", "package": "vllm", "baseline_version": "0.30.0",
                      "fixed_in": None,
                      "files": [{"path": f["path"], "sha256": f["after_sha256"], "baseline_sha256": f["before_sha256"],
                                 "export": f"{hid}/{f['path']}", **code(f)} for f in files]}
                     for hid, files in files_by_id.items()],
    }
    path.write_text(json.dumps(lock))
    return path


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A real vLLM 0.30.0 install with vllm-hotfix installed and three hotfixes applied to its files."""
    work = tmp_path_factory.mktemp("guarded")
    wheel = realdata.build_project_wheel(work)
    venv = realdata.copy_venv(realdata.vllm_template("0.30.0"), work / "venv")
    realdata.pip_install(venv, str(wheel))
    pristine_lost = (venv.site_packages / LOST_FILE).read_bytes()
    files = {hid: [patch_file(venv.site_packages, *edit)] for hid, edit in HOTFIXES.items()}
    files[LOST] = [file_record(LOST_FILE, pristine_lost, pristine_lost + b"# hotfix: cache-config-note\n")]
    harness = work / "harness.py"
    harness.write_text(HARNESS)
    return {"venv": venv, "files": files, "harness": harness, "work": work}


@pytest.fixture
def recorded(guarded):
    """The four hotfixes recorded in this test's state dir (HOTFIX_STATE_DIR)."""
    write_state(guarded["venv"].site_packages, guarded["files"])
    return guarded


@pytest.fixture(scope="module")
def overlay(guarded):
    """An unpatched copy of vLLM's Python sources, as a PYTHONPATH entry that shadows site-packages."""
    directory = realdata.python_sources(realdata.vllm_template("0.30.0").site_packages, guarded["work"] / "overlay")
    return directory


def vllm_process(guarded, **env: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Run the loader harness as a vLLM process would; return it and its JSON report (None if it died)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    full_env["VLLM_PLUGINS"] = "vllm_hotfix_guard"  # vLLM's own general plugins need torch
    full_env.update(env)
    proc = subprocess.run([str(guarded["venv"].python), str(guarded["harness"])], capture_output=True, text=True,
                          env=full_env, cwd=guarded["work"], timeout=120)
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, (reports[0] if reports else None)


def guard_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if "vllm-hotfix guard" in line and "HotfixNotInEffect" not in line]


def test_entry_point_is_listed_in_a_real_install(guarded):
    code = ("import json, vllm_hotfix; from importlib.metadata import entry_points; "
            "print(json.dumps([[e.name, e.value] for e in entry_points(group='vllm.general_plugins')] + [vllm_hotfix.__file__]))")
    out = subprocess.run([str(guarded["venv"].python), "-c", code], capture_output=True, text=True, check=True,
                         cwd=guarded["work"]).stdout
    *plugins, location = json.loads(out)
    assert [p for p in plugins if p[0] == "vllm_hotfix_guard"] == [["vllm_hotfix_guard", "vllm_hotfix_guard:register"]]
    assert Path(location).is_relative_to(guarded["venv"].site_packages)


def test_does_nothing_and_imports_nothing_heavy_unless_asked(guarded):
    proc, report = vllm_process(guarded, HOTFIX_STRICT="1")
    assert proc.returncode == 0, proc.stderr
    assert guard_lines(proc) == []
    hotfix_modules = {m for m in report["new_modules"] if m.startswith("vllm_hotfix")}
    assert hotfix_modules == {"vllm_hotfix_guard"}  # its register() imports nothing more unless the guard is on
    assert not {m for m in report["new_modules"] if m.split(".")[0] in ("vllm", "torch", "click")}


def test_three_applied_hotfixes_in_effect_one_info_line_per_process(recorded):
    proc, report = vllm_process(recorded, HOTFIX_REQUIRE=APPLIED, HOTFIX_STRICT="1", HARNESS_TIMES="5")
    assert proc.returncode == 0, proc.stderr
    (line,) = guard_lines(proc)
    assert re.match(rf"INFO vllm.vllm_hotfix: vllm-hotfix guard pid={report['pid']} role=main \(harness.py\) "
                    r"fingerprint=hf1-[0-9a-f]{16}: ", line), line  # of the hotfixes it checked (the records' here)
    assert line.endswith("; ".join(f"{hid} [require] in effect" for hid in HOTFIXES))
    assert len(report["call_seconds"]) == 5
    assert not {m for m in report["new_modules"] if m.split(".")[0] in ("vllm", "torch")}
    print(f"one guard call, 3 hotfixes: {report['call_seconds'][0] * 1e3:.2f} ms; cached: {report['call_seconds'][1] * 1e6:.1f} us")


def test_lost_hotfix_logged_as_error_and_strict_stops_the_process(recorded):
    proc, _ = vllm_process(recorded, HOTFIX_REQUIRE=f"mamba-align-block-size,{LOST},never-applied")
    assert proc.returncode == 0
    (line,) = guard_lines(proc)
    lost_path = recorded["venv"].site_packages / LOST_FILE
    assert line.startswith("ERROR vllm.vllm_hotfix: vllm-hotfix guard pid=")
    assert "mamba-align-block-size [require] in effect" in line
    assert f"{LOST} [require] NOT IN EFFECT: lost: {lost_path} has sha256 " in line and "(the unpatched original)" in line
    assert "never-applied [require] NOT IN EFFECT: not-applied: no record of applying it in " in line
    python = recorded["venv"].python
    assert f"-> the install was replaced (rebuild/reinstall?): re-apply with `hotfix apply {LOST} --python {python}`" in line
    # an id no record names: the guard knows no catalog, so the form to complete is not a command to paste
    assert f"-> apply it (hotfix apply never-applied --python {python} --catalog DIR (the catalog that has it))" in line

    proc, report = vllm_process(recorded, HOTFIX_REQUIRE=LOST, HOTFIX_STRICT="1")
    assert proc.returncode == 1 and report is None
    assert "vllm_hotfix_guard.HotfixNotInEffect: vllm-hotfix: 1 required hotfix(es) not in effect" in proc.stderr
    assert f"re-apply with `hotfix apply {LOST} --python {python}`" in proc.stderr

    proc, _ = vllm_process(recorded, HOTFIX_REQUIRE=LOST, HOTFIX_STRICT="1", VLLM_PLUGINS="some_other_plugin")
    assert proc.returncode == 0 and guard_lines(proc) == []


def test_every_process_checks_itself_spawned_and_forked(recorded):
    proc, _ = vllm_process(recorded, HOTFIX_REQUIRE=APPLIED, HARNESS_SPAWN="EngineCore_DP0")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"role=EngineCore_DP0 fingerprint=hf1-[0-9a-f]{16}: mamba-align-block-size \[require\] in effect",
                     guard_lines(proc)[0])

    proc, _ = vllm_process(recorded, HOTFIX_REQUIRE=APPLIED, HARNESS_FORK="VllmWorker-0")
    pids = [json.loads(line)["pid"] for line in proc.stdout.splitlines()]
    lines = guard_lines(proc)
    assert len(lines) == 2 and len(set(pids)) == 2
    assert f"pid={pids[0]} role=main (harness.py)" in lines[0] and f"pid={pids[1]} role=VllmWorker-0" in lines[1]


def test_pythonpath_shadowing_the_patched_install_is_caught(recorded, overlay):
    assert (recorded["venv"].site_packages / MAMBA).read_bytes() != (overlay / MAMBA).read_bytes()
    proc, _ = vllm_process(recorded, HOTFIX_REQUIRE="mamba-align-block-size", PYTHONPATH=str(overlay))
    (line,) = guard_lines(proc)
    assert line.startswith("ERROR ")
    assert (f"mamba-align-block-size [require] NOT IN EFFECT: lost: this process imports vllm from {overlay / 'vllm'}, "
            f"which has no record of it (recorded for {recorded['venv'].site_packages})") in line

    proc, _ = vllm_process(recorded, HOTFIX_REQUIRE="mamba-align-block-size", PYTHONPATH=str(overlay), HOTFIX_STRICT="1")
    assert proc.returncode == 1
    assert "HotfixNotInEffect" in proc.stderr and "remove the PYTHONPATH entry that shadows the patched install" in proc.stderr


def test_lock_file_in_effect_and_shadowed(guarded, overlay, tmp_path):
    lock = write_lock(tmp_path / "hotfix.lock", guarded["venv"].site_packages,
                      {hid: guarded["files"][hid] for hid in HOTFIXES}, python=guarded["venv"].python)
    proc, _ = vllm_process(guarded, HOTFIX_LOCK=str(lock), HOTFIX_STRICT="1")
    assert proc.returncode == 0, proc.stderr
    summary = [line for line in guard_lines(proc) if ": code " not in line]  # not the code check's lines
    assert summary[0].endswith("; ".join(f"{hid} [lock] in effect" for hid in HOTFIXES)), summary

    # the same lock as written before code names were locked: the files hold the fix, but whether the fixed
    # functions run cannot be checked -- unknown, never in effect (as a record without them, HOTFIX_REQUIRE)
    old = write_lock(tmp_path / "old.lock", guarded["venv"].site_packages,
                     {"mamba-align-block-size": guarded["files"]["mamba-align-block-size"]})
    proc, _ = vllm_process(guarded, HOTFIX_LOCK=str(old), HOTFIX_STRICT="1")
    assert proc.returncode == 1 and "HotfixNotInEffect" in proc.stderr
    assert (f"mamba-align-block-size: unknown: its lock keeps no code names for {MAMBA} (written by an older "
            f"vllm-hotfix or by hand)") in proc.stderr
    assert "re-export it (`hotfix export mamba-align-block-size --to hotfix-export --python " in proc.stderr

    proc, _ = vllm_process(guarded, HOTFIX_LOCK=str(lock), HOTFIX_STRICT="1", PYTHONPATH=str(overlay))
    assert proc.returncode == 1
    assert f"mamba-align-block-size: lost: {overlay / MAMBA} has sha256 " in proc.stderr
    assert "(the unpatched original)" in proc.stderr and f"`hotfix verify --lock {lock} --python " in proc.stderr


def test_unusable_lock_file_is_named(guarded, tmp_path):
    lock = tmp_path / "hotfix.lock"
    lock.write_text(json.dumps({"schema": 1, "site_packages": "/x", "hotfixes": [{"id": "x", "files": {}}]}))
    proc, _ = vllm_process(guarded, HOTFIX_LOCK=str(lock))
    assert proc.returncode == 0
    assert (f"(lock) [lock] NOT IN EFFECT: cannot use HOTFIX_LOCK: {lock}: hotfixes[0].files: expected list, got an object"
            in guard_lines(proc)[0])

    absent = tmp_path / "absent.lock"
    proc, _ = vllm_process(guarded, HOTFIX_LOCK=str(absent), HOTFIX_STRICT="1")
    assert proc.returncode == 1
    assert f"(lock): cannot use HOTFIX_LOCK: {absent}: lock file not found -> run `hotfix export" in proc.stderr


def test_print_env_shell_lines_turn_the_guard_on(recorded, run_hotfix):
    result = run_hotfix("guard", "--print-env", "--require", "mamba-align-block-size, scheduler-note", "--format", "shell")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["export HOTFIX_REQUIRE=mamba-align-block-size,scheduler-note",
                                          "export HOTFIX_STRICT=1"]
    assert "VLLM_PLUGINS" in result.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["VLLM_PLUGINS"] = "vllm_hotfix_guard"
    proc = subprocess.run(["bash", "-c", f'{result.stdout}\nexec "$0" "$1"', str(recorded["venv"].python),
                           str(recorded["harness"])], capture_output=True, text=True, env=env, cwd=recorded["work"])
    assert proc.returncode == 0, proc.stderr
    assert guard_lines(proc)[0].endswith("mamba-align-block-size [require] in effect; scheduler-note [require] in effect")


@pytest.mark.tools
def test_print_env_compose_and_k8s_are_valid_yaml(run_hotfix, tmp_path):
    result = run_hotfix("guard", "--print-env", "--no-strict")
    service = "\n".join("    " + line for line in result.stdout.splitlines())
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(f"services:\n  vllm:\n    image: vllm/vllm-openai:v0.30.0\n{service}\n")
    config = subprocess.run(["docker-compose", "-f", str(compose), "config"], capture_output=True, text=True)
    assert config.returncode == 0, config.stderr
    assert YAML(typ="safe").load(config.stdout)["services"]["vllm"]["environment"] == {
        "HOTFIX_LOCK": "/etc/vllm-hotfix/hotfix.lock", "HOTFIX_STRICT": "0"}

    result = run_hotfix("guard", "--print-env", "--format", "k8s", "--lock", "/opt/lock/hotfix.lock")
    assert YAML(typ="safe").load(result.stdout) == {"env": [{"name": "HOTFIX_LOCK", "value": "/opt/lock/hotfix.lock"},
                                                          {"name": "HOTFIX_STRICT", "value": "1"}]}


@pytest.mark.parametrize("args, message", [
    (["--require", "Bad Id"], "--require: not a hotfix id: Bad Id"),
    (["--lock", "hotfix.lock"], "--lock hotfix.lock: must be an absolute path inside the container"),
])
def test_print_env_usage_errors(run_hotfix, args, message):
    result = run_hotfix("guard", "--print-env", *args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == f"hotfix: error: {message}"
    assert re.match(r"hotfix: hint: \S", result.stderr.splitlines()[1])


def test_a_guard_bug_is_logged_not_raised_unless_strict(monkeypatch, caplog):
    from vllm_hotfix_guard import plugin, required

    def broken(ids):
        raise KeyError("files")

    monkeypatch.setattr(required, "check_required_ids", broken)
    monkeypatch.setattr(plugin, "_last_check", None)
    monkeypatch.setenv("HOTFIX_REQUIRE", "x")
    plugin.register()
    plugin.register()
    (record,) = [r for r in caplog.records if r.name == "vllm.vllm_hotfix"]
    assert record.levelname == "ERROR" and "(guard) NOT IN EFFECT: internal error: KeyError: 'files'" in record.message
    monkeypatch.setenv("HOTFIX_STRICT", "1")
    with pytest.raises(plugin.HotfixNotInEffect, match=r"\(guard\): internal error: KeyError"):
        plugin.register()

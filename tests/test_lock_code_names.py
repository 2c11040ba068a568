"""One verdict in every mode (issue 43, item 4), the lock's half of the code check: a locked Python file
whose lock entry keeps no code names (written before `hotfix export` locked them, or by hand) makes its
hotfix ``unknown`` -- NOT IN EFFECT -- in every reader of a lock, decided once (txn/lock_check.unnamed_code):
the guard's lock mode (in this process), `hotfix verify --lock`, `status --runtime`'s guard
(plugin.judge_process). A plugin rebinding the fixed function would otherwise pass, unseen. A file that
is not Python needs none. The real vLLM 0.30.0 loader: tests/test_guard_vllm_record_code.py."""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path

import click
import pytest

from fixtures.codenames import code_of
from vllm_hotfix_guard import plugin as guard
from vllm_hotfix_guard.txn import hotfix_lock, lock_check

HOTFIX = "mamba-align-block-size"  # a catalog id: the guard's export command is pasteable as is
CORE = Path(click.__file__).parent / "core.py"
TYPED = Path(click.__file__).parent / "py.typed"
UNNAMED = ("unknown: its lock keeps no code names for click/core.py (written by an older vllm-hotfix or by hand): "
           "whether the fixed functions are the ones running cannot be checked")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_lock(path: Path, files: dict) -> Path:
    """A lock of one hotfix on click (this interpreter's copy): ``files`` path -> its ``code`` or None."""
    entries = []
    for rel, code in files.items():
        data = (CORE.parent.parent / rel).read_bytes()
        entries.append({"path": rel, "sha256": sha(data), "baseline_sha256": None, "export": f"{HOTFIX}/{rel}",
                        **({"code": code} if code is not None else {})})
    path.write_text(json.dumps({"schema": 1, "site_packages": "/x", "hotfixes": [
        {"id": HOTFIX, "version": 1, "distribution": "click", "package": "click", "baseline_version": version("click"),
         "fixed_in": None, "files": entries}]}))
    return path


@pytest.fixture(scope="module")
def core_code() -> dict:
    return code_of("click/core.py", b"", CORE.read_bytes())


def test_the_one_rule_unknown_for_a_python_file_without_names_never_for_other_files(tmp_path, core_code):
    installed = lock_check.Installed(CORE.parent, version("click"))
    old = hotfix_lock.load_lock(write_lock(tmp_path / "old.lock", {"click/core.py": None, "click/py.typed": None}))
    (check,) = lock_check.check_lock(old, lambda package: installed)
    assert (check.state, check.in_effect, check.unnamed) == ("unknown", False, True)
    assert f"unknown: {check.detail}" == UNNAMED
    assert all(f.state == "patched" for f in check.files)  # the files hold the fix: only the code is unchecked
    advice = lock_check.advice(check, lambda locked, fc: "unused", "--python /opt/venv/bin/python")
    assert advice.startswith(f"re-export it (`hotfix export {HOTFIX} --to hotfix-export --python /opt/venv/bin/python`: "
                             "the new lock names the fixed code), sign the new lock")

    named = hotfix_lock.load_lock(write_lock(tmp_path / "new.lock", {"click/core.py": core_code, "click/py.typed": None}))
    (check,) = lock_check.check_lock(named, lambda package: installed)
    assert (check.state, check.unnamed) == ("applied", False)  # py.typed: not Python, no names to keep

    two = hotfix_lock.load_lock(write_lock(tmp_path / "two.lock", {"click/core.py": None, "click/types.py": None}))
    (check,) = lock_check.check_lock(two, lambda package: installed)
    assert "no code names for click/core.py (+1 more) (written by" in check.detail

    installed_other = lock_check.Installed(CORE.parent, "0.0.1")  # another release: stale, as before
    (check,) = lock_check.check_lock(old, lambda package: installed_other)
    assert (check.state, check.unnamed) == ("stale", False)


def test_the_guard_in_lock_mode_says_unknown_where_it_said_in_effect(tmp_path, core_code, monkeypatch):
    monkeypatch.delenv("HOTFIX_CATALOG", raising=False)
    old = write_lock(tmp_path / "old.lock", {"click/core.py": None})
    (verdict,) = guard.check(lock=str(old), require=())
    assert (verdict.in_effect, verdict.source, verdict.detail) == (False, "lock", UNNAMED)
    assert verdict.remedy.startswith(f"re-export it (`hotfix export {HOTFIX} --to hotfix-export --python ")
    assert "(`hotfix sign hotfix-export/hotfix.lock --key KEY`) and deploy it with its files" in verdict.remedy
    assert f"{HOTFIX} [lock] NOT IN EFFECT: {UNNAMED} -> re-export it" in guard.summary_line((verdict,), "hf1-x")
    # `status --runtime --lock`: the guard's own answer there
    verdicts, _ = guard.judge_process(lock=str(old), require=())
    assert [(v.in_effect, v.detail) for v in verdicts] == [(False, UNNAMED)]

    named = write_lock(tmp_path / "new.lock", {"click/core.py": core_code})
    (verdict,) = guard.check(lock=str(named), require=())
    assert verdict.in_effect, verdict


def test_verify_lock_says_not_in_effect_with_the_remedy(run_hotfix, tmp_path, core_code):
    old = write_lock(tmp_path / "old.lock", {"click/core.py": None})
    result = run_hotfix("verify", "--lock", str(old))
    assert result.returncode == 1, result.stdout + result.stderr  # docs/exit-codes.md: not in effect
    lines = result.stdout.splitlines()
    assert lines[0] == f"NOT IN EFFECT: {HOTFIX}@1 is {UNNAMED}"
    assert lines[1].startswith(f"  re-export it (`hotfix export {HOTFIX} --to hotfix-export --python ")
    result = run_hotfix("verify", "--lock", str(old), "--json")
    (entry,) = json.loads(result.stdout)
    assert (entry["state"], entry["files"][0]["state"], entry["files"][0]["code"]) == ("unknown", "patched", None)
    assert entry["advice"].startswith("re-export it (`hotfix export")

    named = write_lock(tmp_path / "new.lock", {"click/core.py": core_code})
    result = run_hotfix("verify", "--lock", str(named))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"in effect: {HOTFIX}@1")


def test_a_lock_whose_files_keep_their_names_loads_no_printing_module(tmp_path, core_code):
    """The guard's common case (every file in effect, its names kept) prints plain words: output.py (the quoting
    of outside strings) and the readiness probe stay out of the vLLM process (the guard's budget)."""
    import os
    import subprocess
    import sys

    lock = write_lock(tmp_path / "named.lock", {"click/core.py": core_code})
    script = ("import sys; from vllm_hotfix_guard import plugin; v = plugin.check(lock=sys.argv[1], require=()); "
              "print([x.in_effect for x in v]); print(sorted(m for m in sys.modules if m.startswith('vllm_hotfix')))")
    src = str(Path(guard.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", script, str(lock)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": src})
    assert done.returncode == 0, done.stderr
    effect, modules = done.stdout.splitlines()[-2:]
    assert effect == "[True]", done.stdout
    assert "vllm_hotfix_guard.output" not in modules and "vllm_hotfix_guard.ready_probe" not in modules, modules
    assert "'vllm_hotfix'" not in modules and "vllm_hotfix." not in modules.replace("vllm_hotfix_guard", "")


@pytest.mark.real
def test_status_in_a_container_and_verify_lock_agree_and_the_remedy_runs_as_pasted(vllm_install, run_hotfix, tmp_path):
    """A real export on vLLM 0.30.0, its file in place (the bind mount): `status` in the container (HOTFIX_LOCK,
    nothing recorded) and `verify --lock` say applied with the export's lock, unknown with the same lock
    without its code names; the `hotfix export` they print writes the names again."""
    import shlex
    import shutil

    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python))
    assert run_hotfix("export", HOTFIX, "--to", tmp_path / "export", *options).returncode == 0
    lock = tmp_path / "export" / "hotfix.lock"
    doc = json.loads(lock.read_text())
    (locked,) = doc["hotfixes"][0]["files"]
    shutil.copyfile(tmp_path / "export" / locked["export"], venv.site_packages / locked["path"])  # the bind mount
    del locked["code"]
    old = tmp_path / "old.lock"
    old.write_text(json.dumps(doc))
    for lock_file, state, code in ((lock, "applied", 0), (old, "unknown", 1)):
        status = run_hotfix("status", HOTFIX, *options, "--json", env={"HOTFIX_LOCK": str(lock_file)})
        (entry,) = json.loads(status.stdout)
        assert (entry["state"], status.returncode) == (state, code), status.stdout + status.stderr
        verify = run_hotfix("verify", "--lock", lock_file, *options, "--json")
        (checked,) = json.loads(verify.stdout)
        assert (checked["state"], verify.returncode) == (state, code), verify.stdout + verify.stderr
    assert entry["detail"].startswith(f"its lock keeps no code names for {locked['path']} (written by an older")
    assert entry["advice"] == checked["advice"]
    command = entry["advice"].split("re-export it (`", 1)[1].split("`", 1)[0]
    assert command == f"hotfix export {HOTFIX} --to hotfix-export --python {venv.python}"
    project = tmp_path / "project"
    project.mkdir()
    done = run_hotfix(*shlex.split(command)[1:], cwd=project)
    assert done.returncode == 0, done.stderr
    (again,) = json.loads((project / "hotfix-export" / "hotfix.lock").read_text())["hotfixes"][0]["files"]
    assert again["code"]["names"], again


def test_the_code_check_s_start_loads_no_judge_while_the_fixed_module_is_not_imported(tmp_path, core_code):
    """register() with a lock whose names are kept, the fixed module not imported yet (vLLM imports model code
    later): the names are taken and the checkpoints armed, but judge.py and core/codeprint.py (which judge a
    loaded module) stay out of the process until a fixed module is there to judge (the guard's budget)."""
    import os
    import subprocess
    import sys

    lock = write_lock(tmp_path / "named.lock", {"click/core.py": core_code})
    script = ("import sys; sys.modules.pop('click.core', None); sys.modules.pop('click', None); "
              "from vllm_hotfix_guard import plugin; plugin.register(); "
              "print(sorted(m for m in sys.modules if m.startswith('vllm_hotfix_guard')))")
    src = str(Path(guard.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": src, "HOTFIX_LOCK": str(lock)})
    assert done.returncode == 0, done.stderr
    modules = done.stdout.splitlines()[-1]
    assert "vllm_hotfix_guard.code'" in modules and "vllm_hotfix_guard.codestate'" in modules, modules
    assert "vllm_hotfix_guard.judge'" not in modules and "vllm_hotfix_guard.core.codeprint'" not in modules, modules

import base64
import hashlib
import json
import subprocess
from pathlib import Path

import pytest


@pytest.mark.real
def test_audit_names_one_changed_byte_and_passes_again_after_restore(run_hotfix, vllm_install):
    venv = vllm_install("0.30.0")
    done = run_hotfix("audit", "vllm", "--python", venv.python, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["pristine"] is True and data["differences"] == []
    assert data["files_checked"] == 5102 and data["bytes"] > 770_000_000

    rel = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
    path = venv.site_packages / rel
    original = path.read_bytes()
    init = venv.package_dir / "config" / "__init__.py"
    init_bytes = init.read_bytes()
    path.write_bytes(original[:100] + b"#" + original[101:])
    (venv.package_dir / "sitecustomize_evil.py").write_text("print('hi')\n")
    init.unlink()
    done = run_hotfix("audit", "vllm", "--python", venv.python)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "missing    vllm/config/__init__.py",
        "unrecorded vllm/sitecustomize_evil.py",
        "..5......  " + rel,
        "vllm 0.30.0: 5102 files, 771 MB checked against vllm-0.30.0.dist-info/RECORD: NOT pristine, 3 difference(s)",
    ]

    path.write_bytes(original)
    init.write_bytes(init_bytes)
    (venv.package_dir / "sitecustomize_evil.py").unlink()
    done = run_hotfix("audit", "vllm", "--python", venv.python)
    assert done.returncode == 0 and done.stdout.endswith(": pristine\n")

    record_file = venv.site_packages / "vllm-0.30.0.dist-info" / "RECORD"
    record_file.write_text("".join(line for line in record_file.read_text().splitlines(keepends=True)
                                   if not line.startswith("vllm/__init__.py,")))
    done = run_hotfix("where", "vllm", "--python", venv.python, "--json")
    assert json.loads(done.stdout)["warnings"] == [
        f"{record_file.parent}/RECORD does not list vllm/__init__.py: the loaded files are not the ones pip installed"]
    done = run_hotfix("audit", "vllm", "--python", venv.python)
    assert done.returncode == 1 and done.stdout.startswith("unrecorded vllm/__init__.py\n")


def test_audit_refuses_an_install_without_record(run_hotfix, tmp_path):
    (tmp_path / "loosepkg").mkdir()
    (tmp_path / "loosepkg" / "__init__.py").write_text("")
    done = run_hotfix("audit", "loosepkg", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 3
    assert done.stderr.startswith(f"hotfix: error: loosepkg at {tmp_path / 'loosepkg'} is a directory install without a pip RECORD")


def _record_line(site_packages: Path, rel: str) -> str:
    data = (site_packages / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}\n"


@pytest.mark.real
def test_bytecode_that_apply_and_rollback_drop_is_not_a_difference(run_hotfix, vllm_install, tmp_path):
    """pip compiles bytecode and lists it in RECORD; apply/rollback drop the touched modules' .pyc."""
    venv = vllm_install("0.30.0")
    sp = venv.site_packages
    touched, untouched = "vllm/envs.py", "vllm/version.py"
    subprocess.run([str(venv.python), "-m", "py_compile", str(sp / touched), str(sp / untouched)], check=True)
    pycs = {rel: str(next((sp / rel).parent.glob(f"__pycache__/{Path(rel).stem}.*.pyc")).relative_to(sp))
            for rel in (touched, untouched)}
    with open(sp / "vllm-0.30.0.dist-info" / "RECORD", "a") as record_file:
        record_file.writelines(_record_line(sp, pyc) for pyc in pycs.values())

    (tmp_path / "a" / "vllm").mkdir(parents=True)
    (tmp_path / "b" / "vllm").mkdir(parents=True)
    original = (sp / touched).read_bytes()
    (tmp_path / "a" / touched).write_bytes(original)
    (tmp_path / "b" / touched).write_bytes(b"# hotfix: bytecode test\n" + original)
    patch = tmp_path / "envs.diff"
    with open(patch, "wb") as out:
        subprocess.run(["diff", "-ruN", "a", "b"], cwd=tmp_path, stdout=out)
    adhoc = ("--patch", patch, "--python", venv.python, "--package", "vllm")
    assert run_hotfix("apply", *adhoc).returncode == 0
    assert not (sp / pycs[touched]).exists()
    done = run_hotfix("rollback", "envs", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    assert (sp / touched).read_bytes() == original

    done = run_hotfix("audit", "vllm", "--python", venv.python, "--json")
    assert done.returncode == 0, done.stdout
    data = json.loads(done.stdout)
    assert data["pristine"] is True and data["differences"] == [] and data["bytecode_missing"] == 1
    done = run_hotfix("audit", "vllm", "--python", venv.python)
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == (
        "1 recorded __pycache__/*.pyc file(s) missing: not a difference, Python recompiles them on import")

    stale = sp / pycs[untouched]
    stale.write_bytes(stale.read_bytes()[:-1] + b"\0")
    done = run_hotfix("audit", "vllm", "--python", venv.python)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == "..5......  " + pycs[untouched]

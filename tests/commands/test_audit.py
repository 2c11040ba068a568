import json


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

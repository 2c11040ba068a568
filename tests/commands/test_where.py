import json

import pytest


@pytest.mark.real
def test_where_finds_a_real_wheel_through_another_interpreter(run_hotfix, vllm_template):
    venv = vllm_template("0.30.0")  # read only; its python has no click, only the stdlib probe runs there
    done = run_hotfix("where", "vllm", "--python", venv.python, "--import")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"path:         {venv.package_dir}" in lines
    assert "kind:         wheel" in lines and "distribution: vllm 0.30.0" in lines
    assert "import:       import vllm failed: ModuleNotFoundError: No module named 'torch' (path above is from find_spec)" in lines

    done = run_hotfix("where", "vllm", "--json", env={"HOTFIX_PYTHON": str(venv.root)})  # a venv directory works too
    data = json.loads(done.stdout)
    assert {k: data[k] for k in ("distribution", "version", "kind", "path", "warnings")} == {
        "distribution": "vllm", "version": "0.30.0", "kind": "wheel", "path": str(venv.package_dir), "warnings": []}
    assert data["dist_info"].endswith("vllm-0.30.0.dist-info") and data["python"] == str(venv.python)


@pytest.mark.real
def test_where_warns_about_a_pythonpath_overlay(run_hotfix, vllm_template, tmp_path):
    venv = vllm_template("0.30.0")
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    done = run_hotfix("where", "vllm", "--python", venv.python, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0
    assert f"path:         {tmp_path / 'vllm'}" in done.stdout.splitlines()
    assert f"WARNING: vllm is loaded from {tmp_path / 'vllm'} (PYTHONPATH entry {tmp_path})" in done.stdout


def test_where_errors_are_one_line_with_exit_codes(run_hotfix, tmp_path):
    done = run_hotfix("where", "no_such_pkg_xyz")
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.splitlines()[0].startswith("hotfix: error: package no_such_pkg_xyz is not importable by ")
    assert "--python" in done.stderr.splitlines()[1]
    done = run_hotfix("where", "vllm", "--python", tmp_path / "python", "--json")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert json.loads(done.stdout)["error"]["message"] == f"--python {tmp_path / 'python'}: no such interpreter"


def test_where_takes_root_as_every_other_command(run_hotfix, tmp_path):
    """Issue 45: `where` had no --root; a checkout is inspected as apply/status see it."""
    (tmp_path / "checkout" / "pkg").mkdir(parents=True)
    (tmp_path / "checkout" / "pkg" / "__init__.py").write_text("")
    done = run_hotfix("where", "pkg", "--root", tmp_path / "checkout", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["root"] == str(tmp_path / "checkout")
    refused = run_hotfix("where", "pkg", "--root", tmp_path / "checkout", "--import")
    assert refused.returncode == 2 and "give --python, not --root" in refused.stderr

import shutil
from pathlib import Path

import pytest

from conftest import create_repo, git
from vllm_hotfix_guard.errors import Refused, UsageError
from vllm_hotfix.install.locate import locate_package, locate_root


@pytest.mark.real
def test_wheel_install_through_another_interpreter(vllm_template):
    venv = vllm_template("0.30.0")  # read only
    target = locate_package("vllm", str(venv.python), do_import=True)
    assert (target.kind, target.distribution, target.version) == ("wheel", "vllm", "0.30.0")
    assert target.package_dir == venv.package_dir and target.root == venv.site_packages
    assert target.dist_info == venv.site_packages / "vllm-0.30.0.dist-info" and target.has_record
    assert target.origin == venv.package_dir / "__init__.py"
    assert target.import_error == "ModuleNotFoundError: No module named 'torch'" and target.import_file is None
    assert target.warnings == () and target.git is None


@pytest.mark.real
def test_pythonpath_overlay_of_a_dirty_checkout_shadows_the_wheel(vllm_template, tmp_path, monkeypatch):
    """Seed 002: sources edited in /vllm-workspace/vllm, put first on PYTHONPATH over an installed wheel."""
    venv = vllm_template("0.30.0")
    checkout = create_repo(tmp_path / "vllm-workspace" / "vllm", {"vllm/__init__.py": "VERSION = 'src'\n",
                                                                   "vllm/envs.py": "X = 1\n"})
    (checkout / "vllm" / "envs.py").write_text("X = 2\n")
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    target = locate_package("vllm", str(venv.python))
    assert target.package_dir == checkout / "vllm" and target.kind == "git" and target.root == checkout
    assert target.git.commit == git(checkout, "rev-parse", "HEAD") and target.git.dirty == (" M vllm/envs.py",)
    shadow, copies = target.warnings
    assert f"PYTHONPATH entry {checkout}" in shadow and "shadows the installed vllm 0.30.0" in shadow
    assert str(venv.package_dir) in shadow
    assert copies.startswith("2 copies of vllm on sys.path") and target.copies == (checkout / "vllm", venv.package_dir)


@pytest.mark.real
def test_pth_code_that_puts_an_overlay_first_is_named(vllm_install, tmp_path):
    venv = vllm_install("0.30.0")
    overlay = tmp_path / "overlay"
    shutil.copytree(venv.package_dir, overlay / "vllm", ignore=shutil.ignore_patterns("*.so", "vllm-rs", "*.py[!i]"))
    pth = venv.site_packages / "zz_overlay.pth"
    pth.write_text(f"import sys; sys.path.insert(0, {str(overlay)!r})\n")
    target = locate_package("vllm", str(venv.python))
    assert target.package_dir == overlay / "vllm" and target.kind == "directory"
    assert any(f"put on sys.path by code in {pth}" in w and "shadows the installed" in w for w in target.warnings)


@pytest.mark.slow
def test_editable_install_of_a_git_repo_in_another_python(editable_install):
    venv, repo = editable_install
    target = locate_package("tinypkg", str(venv.python), do_import=True)
    assert (target.kind, target.distribution, target.version) == ("editable", "tiny-pkg", "1.2.3")
    assert target.package_dir == repo / "tinypkg" and target.root == repo
    assert target.import_file == str(repo / "tinypkg" / "__init__.py")
    assert target.git.commit == git(repo, "rev-parse", "HEAD") and target.git.branch == "main" and target.git.clean
    assert target.python == str(venv.python) and target.warnings == ()


def test_missing_package_and_bad_interpreter_are_one_line_errors(tmp_path):
    with pytest.raises(Refused, match="package no_such_pkg_xyz is not importable by"):
        locate_package("no_such_pkg_xyz")
    with pytest.raises(UsageError, match="no such interpreter"):
        locate_package("json", str(tmp_path / "nope"))
    with pytest.raises(UsageError, match="could not run the probe"):
        locate_package("json", shutil.which("false"))


def test_locate_root_of_a_checkout(make_repo):
    repo = make_repo({"vllm_ascend/__init__.py": "", "setup.py": ""})
    target = locate_root(repo)
    assert (target.kind, target.package, target.root) == ("git", "vllm_ascend", repo.resolve())
    assert target.git.clean and target.python is None
    assert locate_root(repo / "vllm_ascend", "x").kind == "git"
    with pytest.raises(UsageError):
        locate_root(Path(repo) / "missing")


def test_import_that_loads_another_file_than_find_spec_is_a_loud_warning(tmp_path, monkeypatch):
    (tmp_path / "swapped").mkdir()
    (tmp_path / "swapped" / "__init__.py").write_text("import sys, json\nsys.modules[__name__] = json\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    target = locate_package("swapped", do_import=True)
    (warning,) = target.warnings
    assert warning.startswith(f"MISMATCH: `import swapped` loads {target.import_file} but find_spec resolves "
                              f"{tmp_path / 'swapped' / '__init__.py'}")


def test_the_probe_in_this_process_answers_what_the_probe_process_answers(tmp_path):
    """When the target is the interpreter running hotfix, the probe runs in-process (no second
    interpreter at container start); its answer is the probe process's, PYTHONPATH overlays included."""
    import json
    import os
    import subprocess
    import sys

    from vllm_hotfix.install import locate
    from vllm_hotfix_guard.install import probe

    overlay = tmp_path / "overlay"
    (overlay / "click").mkdir(parents=True)
    (overlay / "click" / "__init__.py").write_text("")
    elsewhere = tmp_path / "bin" / "python"
    elsewhere.parent.mkdir()
    os.symlink(sys.executable, elsewhere)  # outside the venv: another interpreter (the base one)
    assert locate.is_this_interpreter(sys.executable) and not locate.is_this_interpreter(str(elsewhere))
    here_code = "import json; from vllm_hotfix_guard.install import probe; print(json.dumps(probe.probe_here('click')))"
    for extra in ({}, {"PYTHONPATH": str(overlay)}):
        env = {**os.environ, **extra}
        here = json.loads(subprocess.run([sys.executable, "-c", here_code], env=env, capture_output=True,
                                         text=True, check=True).stdout)
        out = subprocess.run([sys.executable, "-c", Path(probe.__file__).read_text(), "click"], env=env,
                             capture_output=True, text=True, check=True).stdout
        there = probe.read_facts(out)
        assert here == there, extra
        assert (here["spec"]["origin"].startswith(str(overlay))) == bool(extra)


@pytest.mark.real
def test_a_probe_started_ahead_answers_what_a_probe_started_on_demand_answers(vllm_template, monkeypatch):
    """`verify --lock --python` starts the probe's interpreter before it knows the package (the start-up
    overlaps loading the command) and hands it the name later: same facts as a probe started on demand."""
    from vllm_hotfix.install import locate

    python = str(vllm_template("0.30.0").python)
    on_demand = locate.run_probe("vllm", python)
    locate.start_probe(python)
    assert (python, False, None) in locate._started
    ahead = locate.run_probe("vllm", python)
    assert locate._started == {}
    assert ahead == on_demand and ahead["distributions"][0]["version"] == "0.30.0"
    locate.start_probe(python, guard="entry-points")  # `verify --lock`: also the guard's entry points there
    guarded = locate.run_probe("vllm", python, guard="entry-points")
    assert locate._started == {} and {**guarded, "guard": None} == on_demand
    assert guarded["guard"] == {"entry_points": [], "load_error": None, "loaded": False} and on_demand["guard"] is None


def test_a_probe_started_ahead_of_a_missing_interpreter_is_reported_when_used(tmp_path):
    from vllm_hotfix.install import locate

    locate.start_probe(str(tmp_path / "nope"))
    assert locate._started == {}
    with pytest.raises(UsageError, match="no such interpreter"):
        locate.run_probe("json", str(tmp_path / "nope"))


def test_a_probe_started_ahead_and_never_used_exits_at_once(tmp_path):
    """A command that fails after the head start (a malformed lock) leaves no probe behind: the
    process gets end-of-file on stdin and exits, printing nothing."""
    import sys

    from vllm_hotfix.install import locate

    elsewhere = tmp_path / "bin" / "python"
    elsewhere.parent.mkdir()
    import os

    os.symlink(sys.executable, elsewhere)  # another interpreter: the base one behind this venv
    locate.start_probe(str(elsewhere))
    process = locate._started.pop((str(elsewhere), False, None))
    out, err = process.communicate("", timeout=30)
    assert (process.returncode, out, err) == (0, "", "")

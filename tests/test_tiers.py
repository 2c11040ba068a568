"""The tier rules (tests/tiers.py): a planted test that downloads a wheel, starts an external tool or the
full vLLM without declaring it fails, even when it swallows the failure; declared, it runs; plain `pytest`
runs only the fast tier and says how to run the rest. Each case is a real pytest run in a subprocess with
the project's own configuration (pyproject.toml) on a planted test file; its realdata cache is a temporary
folder and pip may not reach an index, so a check that failed to fire could not download anything."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tiers

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
PYVER = "%d.%d" % sys.version_info[:2]

PLANTED = '''
import subprocess
import sys

import pytest

import realdata


def test_downloads_a_wheel_unmarked():
    realdata.vllm_wheel("9.9.9")


def test_swallows_the_failure_unmarked():
    try:
        realdata.vllm_template("9.9.9")
    except BaseException:
        pass


def test_starts_kubectl_unmarked():
    try:
        subprocess.run(["kubectl", "version"], check=True)
    except Exception:
        pass


def test_starts_the_full_vllm_unmarked():
    subprocess.run([str(realdata.VENVS / "vllm-full-9.9.9-py{pyver}" / "bin" / "python"), "-c", "pass"], check=True)


@pytest.mark.real
def test_downloads_a_wheel_marked():
    assert realdata.vllm_wheel("9.9.9").name == "vllm-9.9.9-py3-none-any.whl"


@pytest.mark.tools
def test_starts_kubectl_marked():
    subprocess.run(["kubectl", "version"], check=True)


def test_plain():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A folder with the planted tests, a conftest that loads the tier plugin, a fake `kubectl` first on
    PATH, and a realdata cache holding one fake wheel (so the marked test finds it without a download)."""
    root = tmp_path_factory.mktemp("planted")
    (root / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\npytest_plugins = ['tiers']\n")
    (root / "test_planted.py").write_text(PLANTED.replace("{pyver}", PYVER))
    (root / "bin").mkdir()
    (root / "bin" / "kubectl").write_text("#!/bin/sh\nexit 0\n")
    (root / "bin" / "kubectl").chmod(0o755)
    (root / "cache" / "wheels").mkdir(parents=True)
    (root / "cache" / "wheels" / "vllm-9.9.9-py3-none-any.whl").write_bytes(b"")
    full = root / "cache" / "venvs" / f"vllm-full-9.9.9-py{PYVER}" / "bin"
    full.mkdir(parents=True)
    (full / "python").symlink_to(sys.executable)
    return root


def run_planted(root: Path, *options: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PIP_"))}
    env.update(HOTFIX_TEST_CACHE=str(root / "cache"), PIP_NO_INDEX="1", PATH=f"{root / 'bin'}{os.pathsep}{env['PATH']}")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(root), "--confcutdir",
         str(root), "-p", "no:cacheprovider", "-n", "0", "-rA", *options, str(root / "test_planted.py")],
        capture_output=True, text=True, cwd=root, env=env, timeout=300)
    found = re.findall(r"^(PASSED|FAILED|ERROR) test_planted\.py::(\w+)", done.stdout, re.M)
    return done, {name: outcome for outcome, name in found}


def test_an_unmarked_test_that_downloads_starts_a_tool_or_the_full_vllm_fails(planted):
    done, outcomes = run_planted(planted, "-m", "")
    assert outcomes == {
        "test_downloads_a_wheel_unmarked": "FAILED",
        "test_swallows_the_failure_unmarked": "FAILED",
        "test_starts_kubectl_unmarked": "FAILED",
        "test_starts_the_full_vllm_unmarked": "FAILED",
        "test_downloads_a_wheel_marked": "PASSED",
        "test_starts_kubectl_marked": "PASSED",
        "test_plain": "PASSED",
    }, done.stdout + done.stderr
    assert done.returncode == 1
    out = done.stdout
    assert "test_downloads_a_wheel_unmarked uses realdata.vllm_wheel but is not marked `real`" in out
    assert "test_swallows_the_failure_unmarked uses realdata.vllm_template but is not marked `real`" in out
    assert "test_starts_kubectl_unmarked uses the external tool kubectl (kubectl) but is not marked `tools`" in out
    assert re.search(r"test_starts_the_full_vllm_unmarked uses the full vLLM venv \(.*\) but is not marked `vllm_full`",
                     out)
    assert "pytestmark = pytest.mark.real" in out  # it says how to declare it
    assert not (planted / "cache" / "wheels" / "vllm-9.9.9-py3-none-any.whl").stat().st_size  # nothing downloaded


def test_plain_pytest_runs_only_the_fast_tier_and_says_how_to_run_the_rest(planted):
    done, outcomes = run_planted(planted, "-k", "marked and not unmarked or plain")
    assert outcomes == {"test_plain": "PASSED"}, done.stdout + done.stderr
    assert done.returncode == 0
    assert 'only the fast tier ran (pyproject\'s `-m` default): `python -m pytest -m ""` runs every tier' in done.stdout
    assert "only the fast tier" not in run_planted(planted, "-m", "", "-k", "plain")[0].stdout


def test_the_default_selection_and_the_markers_are_the_tiers():
    pyproject = (REPO / "pyproject.toml").read_text()
    addopts = re.search(r"^addopts = \"(.*)\"$", pyproject, re.M).group(1)
    assert f"-m '{tiers.DEFAULT}'" in addopts
    declared = re.findall(r'^    "(\w+): ', pyproject.split("markers = [", 1)[1].split("]", 1)[0], re.M)
    assert set(tiers.TIERS) <= set(declared)


def test_ci_and_the_readme_run_every_tier():
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"python -m pytest -q -m \"\"", ci)

"""A checkout's version is what its build would produce (install/version.py), checked against
setuptools-scm itself on real git repositories, and on the real vLLM 0.30.0 sources laid out as a
checkout at tag v0.30.0: apply, status and doctor work with `--root`, and `--root` agrees with an
editable install of the same directory (issue 24 item 3)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import realdata
from fixtures.manifests import write_patch_catalog
from target.conftest import git
from vllm_hotfix.install.locate import locate_root
from vllm_hotfix_guard.install.version import checkout_version, next_dev_version

LOGS = Path(__file__).resolve().parents[1] / "doctor" / "logs"
MAMBA_LOGS = (LOGS / "001-mamba-align.log", LOGS / "001-dmesg.txt", LOGS / "001-cuda-gdb.txt")  # as tests/commands/test_doctor.py

SCM_PROJECT = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm>=8"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "scm-demo"\ndynamic = ["version"]\nrequires-python = ">=3.10"\n'
        '[tool.setuptools]\npackages = ["scm_demo"]\n'
        '[tool.setuptools_scm]\nversion_file = "scm_demo/_version.py"\n'
    ),
    ".gitignore": "scm_demo/_version.py\n*.egg-info/\nbuild/\n__pycache__/\n",
    "scm_demo/__init__.py": "",
    "scm_demo/core.py": "def block_index(tokens, cfg):\n    return (tokens - 1) // cfg.block_size\n",
}
PATCH = (b"--- a/scm_demo/core.py\n+++ b/scm_demo/core.py\n@@ -1,2 +1,2 @@\n def block_index(tokens, cfg):\n"
         b"-    return (tokens - 1) // cfg.block_size\n+    return (tokens - 1) // cfg.mamba_block_size\n")


def setuptools_scm(repo: Path) -> str:
    """The oracle: the version setuptools-scm gives this checkout (what `pip install` would build)."""
    done = subprocess.run([sys.executable, "-m", "setuptools_scm"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def ours(repo: Path, package: str = "scm_demo") -> str | None:
    return checkout_version(repo, package).version


def commit(repo: Path, rel: str, text: str) -> None:
    (repo / rel).write_text(text)
    git(repo, "add", rel)
    git(repo, "commit", "-q", "-m", f"edit {rel}")


@pytest.fixture
def scm_repo(make_repo):
    pytest.importorskip("setuptools_scm")
    repo = make_repo(SCM_PROJECT, name="scm-demo")
    git(repo, "tag", "-d", "v1")
    git(repo, "tag", "-a", "v0.30.0", "-m", "release 0.30.0")
    return repo


def test_next_dev_version_is_setuptools_scms_guess_next_dev():
    node = "02c7db4c5e1f00000000000000000000000000000"
    assert next_dev_version("0.30.0", 0, node) == "0.30.0"
    assert next_dev_version("0.30.0", 3, node) == "0.30.1.dev3+g02c7db4c5"
    assert next_dev_version("0.31.0rc2", 1, node) == "0.31.0rc3.dev1+g02c7db4c5"
    assert next_dev_version("0.32.0.dev0", 2, node) == "0.32.0.dev2+g02c7db4c5"
    assert next_dev_version("1.0", 1, None) == "1.1.dev1"
    with pytest.raises(ValueError):
        next_dev_version("0.32.0.dev5", 1, node)  # setuptools-scm refuses to bump it too


def test_git_tags_and_distances_agree_with_setuptools_scm(scm_repo):
    repo = scm_repo
    assert ours(repo) == setuptools_scm(repo) == "0.30.0"
    found = checkout_version(repo, "scm_demo")
    assert (found.source, found.detail, found.distribution, found.derived) == ("git-tag", "git tag v0.30.0", "scm-demo", True)
    for i in range(3):
        commit(repo, "scm_demo/more.py", f"N = {i}\n")
    oracle = setuptools_scm(repo)
    assert re.fullmatch(r"0\.30\.1\.dev3\+g[0-9a-f]{9}", oracle) and ours(repo) == oracle
    assert checkout_version(repo, "scm_demo").detail.startswith("git describe v0.30.0-3-g")
    git(repo, "tag", "v0.31.0rc2")  # a lightweight pre-release tag
    assert ours(repo) == setuptools_scm(repo) == "0.31.0rc2"
    commit(repo, "scm_demo/more.py", "N = 9\n")
    assert ours(repo) == setuptools_scm(repo) and ours(repo).startswith("0.31.0rc3.dev1+g")
    git(repo, "tag", "release-0.32.0.dev0")  # a prefix of dashed words, as setuptools-scm's tag pattern allows
    commit(repo, "scm_demo/more.py", "N = 10\n")
    assert ours(repo) == setuptools_scm(repo) and ours(repo).startswith("0.32.0.dev1+g")
    git(repo, "tag", "nightly")  # not a version: --match '*[0-9]*' skips it, as setuptools-scm does
    assert ours(repo) == setuptools_scm(repo)


def test_a_dirty_tree_keeps_the_release_the_checkout_stands_on(scm_repo):
    """Deliberately unlike setuptools-scm: applying a hotfix dirties the tree; the baseline release stays."""
    repo = scm_repo
    (repo / "scm_demo" / "core.py").write_text("# edited by a hotfix\n")
    assert ours(repo) == "0.30.0" and setuptools_scm(repo).startswith("0.30.1.dev0+g")
    commit(repo, "scm_demo/other.py", "x = 1\n")
    (repo / "scm_demo" / "core.py").write_text("# edited again\n")
    oracle = setuptools_scm(repo)
    assert re.fullmatch(r"0\.30\.1\.dev1\+g[0-9a-f]{9}\.d\d{8}", oracle) and oracle.startswith(ours(repo) + ".d")
    assert git(repo, "status", "--porcelain")  # looking did not clean or rewrite anything


def test_static_version_then_version_file_then_metadata(scm_repo, tmp_path):
    repo = scm_repo
    static = SCM_PROJECT["pyproject.toml"].replace('dynamic = ["version"]', 'version = "1.2.3"')
    (repo / "pyproject.toml").write_text(static)
    found = checkout_version(repo, "scm_demo")
    assert (found.version, found.source) == ("1.2.3", "pyproject")  # the build ignores the tag then

    plain = tmp_path / "plain"  # the same sources without .git (a copied tree, a tarball)
    shutil.copytree(repo, plain, ignore=shutil.ignore_patterns(".git"))
    (plain / "pyproject.toml").write_text(SCM_PROJECT["pyproject.toml"])
    assert checkout_version(plain, "scm_demo").version is None
    (plain / "scm_demo" / "_version.py").write_text(  # as setuptools-scm writes it at build time
        "__version__ = version = '0.30.1.dev3+g02c7db4c5'\n__version_tuple__ = version_tuple = (0, 30, 1, 'dev3')\n")
    found = checkout_version(plain, "scm_demo")
    assert (found.version, found.source, found.detail) == ("0.30.1.dev3+g02c7db4c5", "version-file",
                                                           str(plain / "scm_demo" / "_version.py"))
    (plain / "scm_demo" / "_version.py").unlink()
    (plain / "scm_demo" / "_version.py").symlink_to("/etc/hostname")  # never followed
    assert checkout_version(plain, "scm_demo").version is None
    found = checkout_version(plain, "scm_demo", metadata="0.29.0", metadata_from="x.egg-info/PKG-INFO")
    assert (found.version, found.source, found.derived) == ("0.29.0", "metadata", False)


@pytest.mark.slow
def test_an_editable_install_and_root_give_one_version_and_one_record(scm_repo, tmp_path, run_hotfix):
    """`pip install -e` (a real setuptools-scm build) at the tag, then HEAD moves on: the install's
    metadata still says 0.30.0, but --python and --root both derive the version of the code loaded."""
    repo = scm_repo
    venv = realdata.make_venv(tmp_path / "venv")
    realdata.pip_install(venv, "-e", str(repo))
    where = json.loads(run_hotfix("where", "scm_demo", "--python", venv.python, "--json").stdout)
    assert (where["kind"], where["version"], where["version_from"]) == ("editable", "0.30.0", "git tag v0.30.0")
    for i in range(3):
        commit(repo, "scm_demo/more.py", f"N = {i}\n")
    metadata = next(venv.site_packages.glob("scm_demo-*.dist-info")) / "METADATA"
    assert "Version: 0.30.0\n" in metadata.read_text()  # stale: written at install time
    expected = setuptools_scm(repo)
    where = json.loads(run_hotfix("where", "scm_demo", "--python", venv.python, "--json").stdout)
    assert (where["version"], where["version_derived"]) == (expected, True)
    assert locate_root(repo).version == expected
    human = run_hotfix("where", "scm_demo", "--python", venv.python).stdout
    assert f"scm-demo {expected} (derived from git describe v0.30.0-3-g" in human

    catalog = write_patch_catalog(tmp_path / "catalog", "demo-fix", PATCH, distribution="scm-demo",
                                  versions=">=0.30.0,<0.32.0", fixed_in="0.32.0", title="Demo fix")
    applied = run_hotfix("apply", "demo-fix", "--python", venv.python, "--catalog", catalog)
    assert applied.returncode == 0, applied.stderr
    by_python = json.loads(run_hotfix("status", "demo-fix", "--python", venv.python, "--catalog", catalog, "--json").stdout)
    by_root = json.loads(run_hotfix("status", "demo-fix", "--root", repo, "--catalog", catalog, "--json").stdout)
    assert [(s["state"], s["installed_version"], s["fingerprint"]) for s in by_root] == \
        [(s["state"], s["installed_version"], s["fingerprint"]) for s in by_python] == \
        [("applied", expected, by_python[0]["fingerprint"])]
    assert by_root[0]["version_from"].startswith("git describe v0.30.0-3-g")
    text = run_hotfix("status", "--root", repo, "--catalog", catalog).stdout
    assert f"scm-demo {expected} at {repo}: version derived from git describe v0.30.0-3-g" in text
    assert run_hotfix("verify", "demo-fix", "--root", repo, "--catalog", catalog).returncode == 0


@pytest.fixture(scope="module")
def vllm_checkout(tmp_path_factory):
    """The real vLLM 0.30.0 sources (from the wheel) laid out as an upstream checkout: vLLM's
    pyproject basics (name, dynamic version, setuptools-scm), `vllm/_version.py` ignored as upstream's
    .gitignore has it and absent (never built), committed and tagged v0.30.0."""
    root = tmp_path_factory.mktemp("vllm-checkout") / "vllm-src"
    shutil.copytree(realdata.vllm_source_tree("0.30.0") / "vllm", root / "vllm",
                    ignore=shutil.ignore_patterns("_version.py", "__pycache__"))
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77.0.3", "setuptools-scm>=8.0"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "vllm"\ndynamic = ["version", "dependencies", "optional-dependencies"]\n'
        '[tool.setuptools_scm]\n# no extra settings needed, presence enables setuptools-scm\n')
    (root / ".gitignore").write_text("vllm/_version.py\n__pycache__/\n*.egg-info/\nbuild/\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "vLLM 0.30.0 sources")
    git(root, "tag", "-a", "v0.30.0", "-m", "v0.30.0")
    return root


@pytest.mark.real
@pytest.mark.slow
def test_real_vllm_checkout_at_v0_30_0(vllm_checkout, tmp_path, run_hotfix):
    root = tmp_path / "vllm-src"
    subprocess.run(["git", "clone", "-q", str(vllm_checkout), str(root)], check=True)  # a real clone of the "upstream"
    dry = run_hotfix("apply", "mamba-align-block-size", "--root", root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"vllm 0.30.0 at {root}" in dry.stdout and "patch: mamba-align-block-size/0.27.patch" in dry.stdout
    status = json.loads(run_hotfix("status", "mamba-align-block-size", "--root", root, "--json").stdout)
    assert [(s["state"], s["installed_version"], s["version_from"]) for s in status] == \
        [("not-applied", "0.30.0", "git tag v0.30.0")]
    doctor = run_hotfix("doctor", *MAMBA_LOGS, "--root", root)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr  # matched and needed (it was 9: "version unknown")
    assert f"mamba-align-block-size: needed, not applied → hotfix apply mamba-align-block-size --root {root}" in doctor.stdout

    assert run_hotfix("apply", "mamba-align-block-size", "--root", root).returncode == 0
    assert run_hotfix("verify", "mamba-align-block-size", "--root", root).returncode == 0
    assert json.loads(run_hotfix("doctor", *MAMBA_LOGS, "--root", root, "--json").stdout)["exit_code"] == 0

    ahead = tmp_path / "ahead"  # three commits past the tag: setuptools-scm's rule, still in the range
    subprocess.run(["git", "clone", "-q", str(vllm_checkout), str(ahead)], check=True)
    for i in range(3):
        commit(ahead, "vllm/hotfix_test_note.py", f"N = {i}\n")
    found = locate_root(ahead)
    assert re.fullmatch(r"0\.30\.1\.dev3\+g[0-9a-f]{9}", found.version) and found.version_from.startswith("git describe v0.30.0-3-g")
    if __import__("importlib.util").util.find_spec("setuptools_scm"):
        assert found.version == setuptools_scm(ahead)
    assert run_hotfix("apply", "mamba-align-block-size", "--root", ahead, "--dry-run").returncode == 0

    tarball = tmp_path / "no-git"  # no .git, only the _version.py a build wrote
    shutil.copytree(vllm_checkout, tarball, ignore=shutil.ignore_patterns(".git"))
    (tarball / "vllm" / "_version.py").write_text((realdata.vllm_source_tree("0.30.0") / "vllm" / "_version.py").read_text())
    found = locate_root(tarball)
    assert (found.version, found.version_from, found.kind) == ("0.30.0", str(tarball / "vllm" / "_version.py"), "directory")


BUMP = (b"--- a/scm_demo/_version.py\n+++ b/scm_demo/_version.py\n@@ -1 +1 @@\n-__version__ = version = '0.29.0'\n"
        b"+__version__ = version = '0.30.0'\n")


def test_a_hotfix_that_bumps_the_version_file_is_not_a_release_change_under_its_own_record(tmp_path, run_hotfix):
    """A diff between two releases (the real 0.29.0 -> 0.30.0 one in tests/test_interrupt_real.py) changes
    the file the checkout's version is read from: the release it then reports is the series' own doing, so
    the record stands and the files decide. The same version change made by anything else is a release
    change: lost, and the next apply starts a new series."""
    root, env = tmp_path / "tree", {"HOTFIX_STATE_DIR": str(tmp_path / "state")}
    (root / "scm_demo").mkdir(parents=True)
    (root / "scm_demo" / "__init__.py").write_text("")
    (root / "scm_demo" / "_version.py").write_text("__version__ = version = '0.29.0'\n")
    (tmp_path / "bump.diff").write_bytes(BUMP)

    def state() -> tuple[str, str]:
        done = run_hotfix("status", "--root", root, "--json", env=env)
        return next((s["state"], s["detail"]) for s in json.loads(done.stdout) if s["recorded"])

    done = run_hotfix("apply", "--patch", tmp_path / "bump.diff", "--root", root, "--package", "scm_demo", env=env)
    assert done.returncode == 0, done.stderr
    assert checkout_version(root, "scm_demo").version == "0.30.0"
    assert state()[0] == "applied"
    done = run_hotfix("rollback", "bump", "--root", root, env=env)
    assert done.returncode == 0, done.stderr
    assert (root / "scm_demo" / "_version.py").read_bytes() == b"__version__ = version = '0.29.0'\n"

    (tmp_path / "other.diff").write_bytes(b"--- a/scm_demo/__init__.py\n+++ b/scm_demo/__init__.py\n@@ -0,0 +1 @@\n+x = 1\n")
    done = run_hotfix("apply", "--patch", tmp_path / "other.diff", "--root", root, "--package", "scm_demo", env=env)
    assert done.returncode == 0, done.stderr
    (root / "scm_demo" / "_version.py").write_text("__version__ = version = '0.30.0'\n")  # a reinstall / a checkout
    word, detail = state()
    assert word == "stale" and "changed from 0.29.0 to 0.30.0" in detail


def test_a_checkout_with_tests_beside_its_package_is_named_by_its_project_not_its_folder(tmp_path, run_hotfix):
    """A vLLM checkout has tests/ (and benchmarks/) beside vllm/: the package a --root without one names is
    pyproject's [project] name, so the status trailer says `vllm 0.30.0`, never the folder's name."""
    root = tmp_path / "vllm-src"
    for package in ("vllm", "tests"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text('[project]\nname = "vllm"\nversion = "0.30.0"\n')
    target = locate_root(root)
    assert (target.package, target.distribution, target.version) == ("vllm", "vllm", "0.30.0")
    done = run_hotfix("status", "--root", root, env={"HOTFIX_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode in (0, 1), done.stderr
    assert f"vllm 0.30.0 at {root}: version derived from {root / 'pyproject.toml'} [project] version" in done.stdout
    assert "vllm-src 0.30.0" not in done.stdout
    (root / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "0.30.0"\n')
    assert locate_root(root).package == "vllm-src"  # no way to tell: the directory, as before

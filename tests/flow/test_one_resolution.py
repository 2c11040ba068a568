"""One target resolution, one record: every command finds the same target and the same record, however
the interpreter is named and however the package is installed (real pip installs of a small project).

Rows: a wheel venv named by its interpreter, the same by its venv directory, a real `pip install -e` of a
git checkout, a wheel venv with a PYTHONPATH overlay of a checkout, HOTFIX_PYTHON instead of --python.
Columns: apply, status, verify, export + verify --lock, the in-process guard, kill -9 + status + recover,
rollback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import realdata
from fixtures import crash
from fixtures.manifests import write_patch_catalog
from fixtures.gitrepo import GITIGNORE, init_repo, pyproject_toml

pytestmark = pytest.mark.slow

HOTFIX = "demo-fix"
ORIGINAL = "def block_index(tokens, cfg):\n    return (tokens - 1) // cfg.block_size\n"
PATCHED = "def block_index(tokens, cfg):\n    return (tokens - 1) // cfg.mamba_block_size\n"
PATCH = (
    "--- a/demo_pkg/core.py\n+++ b/demo_pkg/core.py\n@@ -1,2 +1,2 @@\n def block_index(tokens, cfg):\n"
    "-    return (tokens - 1) // cfg.block_size\n+    return (tokens - 1) // cfg.mamba_block_size\n"
).encode()
SRC = Path(__file__).resolve().parents[2] / "src"


def project_files() -> dict[str, str]:
    return {"pyproject.toml": pyproject_toml("demo-pkg", "1.0.0", "demo_pkg"), ".gitignore": GITIGNORE,
            "demo_pkg/__init__.py": "", "demo_pkg/core.py": ORIGINAL}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The project as a git checkout, its wheel, and a catalog with a manifest for it."""
    base = tmp_path_factory.mktemp("demo")
    checkout = init_repo(base / "demo-src", project_files(), branch="main", message="demo 1.0.0")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                    str(checkout), "-w", str(base / "dist")], check=True)
    (wheel,) = (base / "dist").glob("demo_pkg-*.whl")
    catalog = write_patch_catalog(base / "catalog", HOTFIX, PATCH, distribution="demo-pkg",
                                  versions=">=1.0,<2.0", fixed_in="2.0.0", file="fix.patch",
                                  title="Demo: divide by the mamba block size", extra="stats = { files = 1, insertions = 1, deletions = 1 }\n")
    return checkout, wheel, catalog


def wheel_venv(built, where: Path) -> realdata.Venv:
    venv = realdata.make_venv(where)
    realdata.pip_install(venv, str(built[1]))
    return venv


def setups(kind: str, built, tmp_path: Path) -> tuple[list[str], dict, Path, bool]:
    """(the options naming the interpreter, extra env, the root the record must be keyed by, wheel?)"""
    if kind in ("python", "venv-dir", "env"):
        venv = wheel_venv(built, tmp_path / "venv")
        options = {"python": ["--python", str(venv.python)], "venv-dir": ["--python", str(venv.root)], "env": []}[kind]
        env = {"HOTFIX_PYTHON": str(venv.python)} if kind == "env" else {}
        return options, env, venv.site_packages, True
    if kind == "editable":
        venv = realdata.make_venv(tmp_path / "venv")
        checkout = tmp_path / "checkout"
        shutil.copytree(built[0], checkout)
        realdata.pip_install(venv, "-e", str(checkout))
        return ["--python", str(venv.python)], {}, checkout, False
    assert kind == "overlay"
    venv = wheel_venv(built, tmp_path / "venv")
    overlay = tmp_path / "overlay"
    shutil.copytree(built[0], overlay)
    return ["--python", str(venv.python)], {"PYTHONPATH": str(overlay)}, overlay, False


def guard_verdicts(python: str, env: dict) -> list:
    code = (f"import sys, json; sys.path.append({str(SRC)!r}); from vllm_hotfix_guard.plugin import check; "
            f"print(json.dumps([v.as_dict() for v in check(lock=None, require=({HOTFIX!r},))]))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("kind", ["python", "venv-dir", "editable", "overlay", "env"])
def test_every_command_finds_the_same_target_and_record(kind, built, tmp_path, run_hotfix):
    options, env, root, is_wheel = setups(kind, built, tmp_path)
    catalog = ["--catalog", str(built[2])]
    python = options[1] if options else env["HOTFIX_PYTHON"]
    python = str(Path(python) / "bin" / "python") if Path(python).is_dir() else python
    target_file = root / "demo_pkg" / "core.py"

    def hotfix(*args):
        return run_hotfix(*args, *options, *catalog, env=env)

    def status() -> dict:
        done = hotfix("status", HOTFIX, "--json")
        (entry,) = json.loads(done.stdout)
        assert Path(entry["target"]).resolve() == root.resolve(), (kind, entry)
        return entry

    assert status()["state"] == "not-applied"
    applied = hotfix("apply", HOTFIX, "--json")
    assert applied.returncode == 0, applied.stderr
    assert Path(json.loads(applied.stdout)["target"]["root"]).resolve() == root.resolve()
    assert target_file.read_text() == PATCHED
    entry = status()
    assert (entry["state"], entry["recorded"]) == ("applied", True)
    everything = json.loads(hotfix("status", "--json").stdout)
    assert [(e["id"], e["state"], e["recorded"]) for e in everything] == [(HOTFIX, "applied", True)]
    assert hotfix("verify").returncode == 0
    assert hotfix("verify", HOTFIX).returncode == 0

    (verdict,) = guard_verdicts(python, env)
    assert verdict["in_effect"], verdict

    export = hotfix("export", HOTFIX, "--to", tmp_path / "export")
    if is_wheel:  # from the recorded state: the kept backups are the baseline
        assert export.returncode == 0, export.stderr
        lock = hotfix("verify", "--lock", tmp_path / "export" / "hotfix.lock", "--json")
        assert lock.returncode == 0 and json.loads(lock.stdout)[0]["state"] == "applied", lock.stdout
    else:
        assert export.returncode == 3 and str(root) in export.stderr, export.stderr

    back = hotfix("rollback", HOTFIX)
    assert back.returncode == 0, back.stderr
    assert target_file.read_text() == ORIGINAL
    assert status()["state"] == "not-applied" and hotfix("verify", HOTFIX).returncode == 1

    # kill -9 in the middle of an apply: the file switch is done, the journal is not yet retired
    argv = crash.hotfix_argv("apply", HOTFIX, *options, *catalog)
    at = crash.after_switching(argv, target_file, tmp_path / "trace.log", extra_env=env)
    hotfix("rollback", HOTFIX)
    killed = crash.run_with(argv, "rename", at, "signal=SIGKILL", extra_env=env)
    assert killed.returncode != 0
    assert status()["state"] == "interrupted", (at, killed.stderr, target_file.read_text())
    assert hotfix("verify", HOTFIX).returncode == 1
    recovered = hotfix("recover", "--json")
    assert recovered.returncode == 0 and json.loads(recovered.stdout)["recovered"], recovered.stdout
    assert target_file.read_text() == ORIGINAL and status()["state"] == "not-applied"


def src_layout_files() -> dict[str, str]:
    pyproject = pyproject_toml("demo-pkg", "1.0.0", "demo_pkg").replace(
        "[tool.setuptools.packages.find]", '[tool.setuptools.package-dir]\n"" = "src"\n\n[tool.setuptools.packages.find]\nwhere = ["src"]')
    return {"pyproject.toml": pyproject, ".gitignore": GITIGNORE, "src/demo_pkg/__init__.py": "",
            "src/demo_pkg/core.py": ORIGINAL}


@pytest.mark.parametrize("kind", ["src-editable", "subdirectory"])
def test_the_guard_finds_the_record_status_finds(kind, tmp_path, run_hotfix):
    """The guard's root comes from the same rule as every command's (install/facts.py): a src-layout
    editable install is keyed by its project, a package in a subdirectory of a checkout by the work
    tree; before, the guard took the package's parent directory and found no record."""
    venv = realdata.make_venv(tmp_path / "venv")
    if kind == "src-editable":
        project = init_repo(tmp_path / "project", src_layout_files(), branch="main", message="src layout")
        realdata.pip_install(venv, "-e", str(project))
        rel, env = "src/demo_pkg/core.py", {}
    else:
        files = {f"python/{k}": v for k, v in project_files().items() if k.startswith("demo_pkg/")}
        project = init_repo(tmp_path / "project", {**files, "README": "a monorepo\n"}, branch="main", message="sub")
        rel, env = "python/demo_pkg/core.py", {"PYTHONPATH": str(project / "python")}
    patch = tmp_path / "fix.diff"
    patch.write_bytes(PATCH.replace(b"demo_pkg/core.py", rel.encode()))
    options = ["--python", str(venv.python)]

    def hotfix(*args):
        return run_hotfix(*args, *options, env=env)

    done = hotfix("apply", "--patch", patch, "--package", "demo_pkg", "--id", HOTFIX, "--json")
    assert done.returncode == 0, done.stderr
    assert Path(json.loads(done.stdout)["target"]["root"]).resolve() == project.resolve()
    (entry,) = json.loads(hotfix("status", HOTFIX, "--json").stdout)
    assert entry["state"] == "applied" and Path(entry["target"]).resolve() == project.resolve(), entry
    (verdict,) = guard_verdicts(str(venv.python), env)
    assert verdict["in_effect"], verdict
    (project / rel).write_text(ORIGINAL)  # lost: both say so, in the same word
    (entry,) = json.loads(hotfix("status", HOTFIX, "--json").stdout)
    (verdict,) = guard_verdicts(str(venv.python), env)
    assert entry["state"] == "lost" and not verdict["in_effect"] and verdict["detail"].startswith("lost:"), (entry, verdict)


def tagged_project_files() -> dict[str, str]:
    """A checkout whose version its build derives (dynamic, as vLLM's via setuptools-scm): what pip wrote
    into the editable install's metadata goes stale as HEAD moves."""
    pyproject = pyproject_toml("demo-pkg", "1.0.0", "demo_pkg").replace(
        'version = "1.0.0"', 'dynamic = ["version"]') + '\n[tool.setuptools.dynamic]\nversion = {attr = "demo_pkg.__version__"}\n'
    return {"pyproject.toml": pyproject, ".gitignore": GITIGNORE, "demo_pkg/__init__.py": '__version__ = "1.0.0"\n',
            "demo_pkg/core.py": ORIGINAL}


@pytest.mark.parametrize("when", ["head-moves-after-apply", "head-moved-before-apply", "record-without-commit"])
def test_status_and_the_guard_agree_on_a_checkout_whose_head_moves(when, tmp_path, run_hotfix):
    """A checkout's release is named by its HEAD (install/facts.read_head, recorded as target.commit) and
    judged by core.verdict.release_seen in `status` and in the guard alike. Before, status judged the
    version git derives and the guard the metadata `pip install -e` wrote: after HEAD moved past the
    installed tag status said lost and the guard in effect, and a hotfix applied after HEAD moved was
    lost to the guard and applied to status."""
    from fixtures.gitrepo import git

    project = init_repo(tmp_path / "project", tagged_project_files(), branch="main", message="demo 1.0.0")
    git(project, "tag", "v1.0.0")
    venv = realdata.make_venv(tmp_path / "venv")
    realdata.pip_install(venv, "-e", str(project))  # metadata: 1.0.0
    patch = tmp_path / "fix.diff"
    patch.write_bytes(PATCH)
    options = ["--python", str(venv.python)]

    def hotfix(*args):
        return run_hotfix(*args, *options)

    def both() -> tuple[str, bool, str]:
        (entry,) = json.loads(hotfix("status", HOTFIX, "--json").stdout)
        (verdict,) = guard_verdicts(str(venv.python), {})
        return entry["state"], verdict["in_effect"], verdict["detail"]

    def move_head():
        (project / "README").write_text("docs\n")
        git(project, "add", "README")
        git(project, "commit", "-q", "-m", "docs")

    if when != "head-moves-after-apply":
        move_head()  # the checkout's build now says 1.0.1.dev1+g..., the metadata still 1.0.0
    done = hotfix("apply", "--patch", patch, "--package", "demo_pkg", "--id", HOTFIX, "--json")
    assert done.returncode == 0, done.stderr
    recorded = json.loads(done.stdout)["target"]
    assert recorded["commit"] == git(project, "rev-parse", "HEAD").strip(), recorded
    if when == "record-without-commit":  # a record written before commits were recorded: the version decides
        (state_file,) = (Path(os.environ["HOTFIX_STATE_DIR"]) / "targets").glob("*/state.json")
        doc = json.loads(state_file.read_text())
        del doc["target"]["commit"]
        for entry in doc["series"]:  # ... and before records were sealed (the seal covers the commit)
            entry["seal"], entry["patch_sha256"] = None, []
        state_file.write_text(json.dumps(doc))
    state, in_effect, detail = both()
    assert (state, in_effect) == ("applied", True), (state, detail)
    if when == "head-moves-after-apply":
        move_head()
        state, in_effect, detail = both()
        assert state == "stale" and not in_effect and detail.startswith("stale: demo-pkg's checkout moved from commit "), detail
        # the advice: apply again. The work tree kept the change across the move: it is adopted for the new commit
        again = hotfix("apply", "--patch", patch, "--package", "demo_pkg", "--id", HOTFIX)
        assert again.returncode == 0 and again.stdout.startswith("adopted: "), again.stdout
        assert (project / "demo_pkg" / "core.py").read_text() == PATCHED
        state, in_effect, detail = both()
        assert (state, in_effect) == ("applied", True), (state, detail)
        again = hotfix("apply", "--patch", patch, "--package", "demo_pkg", "--id", HOTFIX)
        assert again.stdout.startswith("already applied: "), again.stdout

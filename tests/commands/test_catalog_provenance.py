"""Issue 21, catalog provenance: `list`, `show` and `apply` say which catalog a hotfix comes from, and a user
catalog that redefines a built-in id is refused (exit 8, both files named) unless --allow-shadow /
HOTFIX_ALLOW_SHADOW=1. Real CLI; apply on a real git checkout of the vllm-ascend stand-in."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures.ascend import make_vllm_ascend_checkout
from fixtures.terminal import on_terminal
from fixtures.trees import everything

REPO = Path(__file__).resolve().parents[2]
GLM = "glm-conv-null-slot"
BUILTIN = REPO / "manifests" / f"{GLM}.toml"


def shadowing_catalog(where: Path, version: int = 2) -> Path:
    """A user catalog holding the built-in glm-conv-null-slot under a new version (same patches)."""
    (where / "manifests").mkdir(parents=True)
    shutil.copytree(REPO / "patches" / GLM, where / "patches" / GLM)
    text = BUILTIN.read_text()
    assert "\nversion = 1\n" in text
    (where / "manifests" / f"{GLM}.toml").write_text(text.replace("\nversion = 1\n", f"\nversion = {version}\n"))
    return where



def git_status(checkout: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True).stdout


def test_builtin_hotfixes_say_they_are_built_in(run_hotfix, tmp_path):
    listed = run_hotfix("list")  # into a pipe: tab-separated, FROM the fifth field
    row = next(line.split("\t") for line in listed.stdout.splitlines() if line.startswith(f"{GLM}\t"))
    assert row[4] == "built-in"
    table = on_terminal("list", columns=1000)
    assert " built-in " in next(line for line in table if line.startswith(f"{GLM} "))
    assert table[-1] == f"catalogs: built-in catalog {REPO}"
    entry = next(e for e in json.loads(run_hotfix("list", "--json").stdout) if e["id"] == GLM)
    assert entry["catalog"] == {"origin": "built-in", "path": str(REPO)}
    shown = run_hotfix("show", GLM)
    assert shown.stdout.splitlines()[1] == f"From: built-in catalog {REPO} ({BUILTIN})"
    assert json.loads(run_hotfix("show", GLM, "--json").stdout)["catalog"] == {
        "origin": "built-in", "path": str(REPO), "shadows_builtin": False}
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    dry = run_hotfix("apply", GLM, "--root", checkout, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == f"{GLM}@1 from built-in catalog {REPO} ({BUILTIN})"


@pytest.mark.parametrize("how", ["--catalog", "HOTFIX_CATALOG"])
def test_a_user_catalog_that_shadows_a_built_in_id_is_refused_naming_both_files(run_hotfix, tmp_path, how,
                                                                                _isolated_state):
    catalog = shadowing_catalog(tmp_path / "mine")
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    args, env = ((["--catalog", catalog], None) if how == "--catalog" else ([], {"HOTFIX_CATALOG": str(catalog)}))
    before, state = everything(checkout), everything(_isolated_state)
    user_file = catalog / "manifests" / f"{GLM}.toml"
    where = f"--catalog {catalog}" if how == "--catalog" else f"HOTFIX_CATALOG entry {catalog}"
    for command in (("list",), ("show", GLM), ("apply", GLM, "--root", checkout), ("status", "--root", checkout),
                    ("doctor", os.devnull, "--root", checkout)):
        done = run_hotfix(*command, *args, env=env)
        assert done.returncode == 8, (command, done.stderr)
        assert done.stderr.splitlines()[0] == (f"hotfix: error: {user_file}: hotfix {GLM} from {where} shadows the "
                                               f"built-in {BUILTIN}"), command
        assert "--allow-shadow" in done.stderr and "HOTFIX_ALLOW_SHADOW=1" in done.stderr
    assert everything(checkout) == before and everything(_isolated_state) == state


@pytest.mark.parametrize("allow", ["flag", "env"])
def test_an_allowed_shadow_is_named_everywhere_and_is_what_apply_uses(run_hotfix, tmp_path, allow):
    catalog = shadowing_catalog(tmp_path / "mine")
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    flag = ["--allow-shadow"] if allow == "flag" else []
    env = {"HOTFIX_CATALOG": str(catalog), **({"HOTFIX_ALLOW_SHADOW": "1"} if allow == "env" else {})}
    listed = run_hotfix("list", *flag, env=env)
    assert listed.returncode == 0, listed.stderr
    row = next(line.split("\t") for line in listed.stdout.splitlines() if line.startswith(f"{GLM}\t"))
    assert row[1] == "2" and row[4] == f"{catalog} (shadows built-in)"
    shown = run_hotfix("show", GLM, *flag, env=env)
    assert shown.stdout.splitlines()[1].startswith(f"From: HOTFIX_CATALOG entry {catalog} ({catalog}/manifests/")
    assert "it shadows the built-in hotfix of the same id" in shown.stdout
    applied = run_hotfix("apply", GLM, "--root", checkout, *flag, env=env)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines()[0] == (f"{GLM}@2 from HOTFIX_CATALOG entry {catalog} "
                                              f"({catalog}/manifests/{GLM}.toml)")
    assert git_status(checkout) != ""
    builtin = run_hotfix("show", f"{GLM}@1", *flag, env=env)  # the built-in version is still there, and says so
    assert builtin.stdout.splitlines()[1] == f"From: built-in catalog {REPO} ({BUILTIN})"
    assert run_hotfix("rollback", GLM, "--root", checkout, *flag, env=env).returncode == 0
    assert git_status(checkout) == ""


def test_the_same_id_and_version_twice_is_still_an_error_naming_both(run_hotfix, tmp_path):
    catalog = shadowing_catalog(tmp_path / "mine", version=1)
    done = run_hotfix("list", "--catalog", catalog, "--allow-shadow")
    assert done.returncode == 8
    assert f"hotfix {GLM} version 1 is declared twice: {BUILTIN} and {catalog}/manifests/{GLM}.toml" in done.stderr

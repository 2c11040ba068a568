"""`hotfix verify --lock` names the interpreter and the --catalog dirs it was given in the commands its advice
prints (commands/verify._lock_option), the --catalog words from the one helper, resolve.catalog_words: the
re-export a stale lock asks for runs as pasted, user catalog included. On real vLLM 0.30.0 and 0.31.0 installs."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

import realdata
from vllm_hotfix.flow.resolve import catalog_words

REPO = Path(__file__).resolve().parents[2]


def user_catalog(where: Path) -> Path:
    """A user catalog (a space in its path) holding `my-mamba`, a copy of the built-in mamba fix."""
    (where / "manifests").mkdir(parents=True)
    shutil.copytree(REPO / "patches" / "mamba-align-block-size", where / "patches" / "mamba-align-block-size")
    text = (REPO / "manifests" / "mamba-align-block-size.toml").read_text()
    (where / "manifests" / "my-mamba.toml").write_text(text.replace('id = "mamba-align-block-size"', 'id = "my-mamba"', 1))
    return where


@pytest.mark.real
def test_the_stale_locks_re_export_names_the_catalog_and_runs_as_pasted(tmp_path, run_hotfix, vllm_install):
    mine = user_catalog(tmp_path / "my catalog")
    no_env = {"HOTFIX_CATALOG": ""}
    done = run_hotfix("export", "my-mamba", "--to", tmp_path / "out", "--python", vllm_install("0.30.0").python,
                      "--catalog", mine, env=no_env)
    assert done.returncode == 0, done.stderr
    newer = realdata.vllm_template("0.31.0")  # read only: verify and export write nothing into it
    given = ("--catalog", "my catalog", "--catalog", mine)  # relative, then the same one again: named once
    done = run_hotfix("verify", "--lock", tmp_path / "out" / "hotfix.lock", "--python", newer.python, *given,
                      "--json", cwd=tmp_path, env=no_env)
    assert done.returncode == 1, done.stderr
    (check,) = json.loads(done.stdout)
    assert check["state"] == "stale", check
    (command,) = re.findall(r"`([^`]+)`", check["advice"])
    words = shlex.split(command)
    assert words == ["hotfix", "export", "my-mamba", "--to", "hotfix-export", "--python", str(newer.python),
                     "--catalog", str(mine)]
    again = run_hotfix(*words[1:], cwd=tmp_path, env=no_env)  # as pasted
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "hotfix-export" / "hotfix.lock").read_text())["hotfixes"][0]["baseline_version"] == "0.31.0"


def test_catalog_words_name_the_directory_the_kernel_resolves(tmp_path, monkeypatch):
    """``link/..`` is the parent of the link's target, not the directory holding the link (os.path.abspath's
    answer): the printed --catalog names the catalog the command read, once, absolute."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    monkeypatch.chdir(tmp_path)
    words = catalog_words(None, ["link/..", tmp_path / "real", None])
    assert words[0] == "--catalog" and len(words) == 2 and Path(words[1]).is_absolute()
    assert Path(words[1]).resolve() == (tmp_path / "real").resolve()

"""`hotfix export` (and `hotfix pack`, the same plan) of a hotfix that is not for the target: refused, exit 3,
nothing written, and the hint's `hotfix show ID` names the --catalog the hotfix came from
(resolve.catalog_words), so it runs as pasted: a user catalog's id is unknown without it. On a real vLLM
0.30.0 install, a user catalog whose copy of the mamba fix targets 0.31 only."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def only_031(tmp_path) -> Path:
    """A user catalog (a space in its path) holding `my-mamba`, the mamba fix for vLLM 0.31 alone."""
    mine = tmp_path / "my catalog"
    (mine / "manifests").mkdir(parents=True)
    shutil.copytree(REPO / "patches" / "mamba-align-block-size", mine / "patches" / "mamba-align-block-size")
    text = (REPO / "manifests" / "mamba-align-block-size.toml").read_text()
    text = text.replace('id = "mamba-align-block-size"', 'id = "my-mamba"', 1)
    text = text.replace('versions = ">=0.25.0,<0.32.0"', 'versions = ">=0.31.0,<0.32.0"', 1)
    (mine / "manifests" / "my-mamba.toml").write_text(text)
    return mine


@pytest.mark.parametrize("command", ["export", "pack"])
def test_the_refusal_names_the_catalog_and_its_show_runs_as_pasted(tmp_path, run_hotfix, vllm_install, only_031,
                                                                    command):
    venv = vllm_install("0.30.0")
    out = tmp_path / "out"
    args = ("--to", out)
    done = run_hotfix(command, "my-mamba", *args, "--python", venv.python, "--catalog", only_031, cwd=tmp_path,
                      env={"HOTFIX_CATALOG": ""})
    assert done.returncode == 3, done.stderr
    assert not out.exists()
    error, hint = done.stderr.splitlines()
    assert error.startswith("hotfix: error: my-mamba@1: ") and "0.30.0" in error, error
    (shown,) = re.findall(r"`([^`]+)`", hint)
    assert shlex.split(shown) == ["hotfix", "show", "my-mamba", "--catalog", str(only_031)]
    pasted = run_hotfix(*shlex.split(shown)[1:], cwd=tmp_path / "..", env={"HOTFIX_CATALOG": ""})  # as pasted
    assert pasted.returncode == 0 and "my-mamba" in pasted.stdout and ">=0.31.0,<0.32.0" in pasted.stdout, pasted

"""The project's own promises: README commands, CLI entry points, help."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup, re.S)


def test_readme_has_exactly_two_setup_commands():
    assert len(_readme_commands()) == 2


def test_ci_runs_the_readme_test_command():
    test_command = _readme_commands()[1].strip()
    ci = (REPO / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()


def test_version_and_help_list_every_command():
    out = subprocess.run([sys.executable, "-m", "vllm_hotfix", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for name in ("apply", "status", "verify", "rollback", "recover", "where", "audit", "list", "show",
                 "new", "check-catalog", "export", "compose", "guard", "k8s", "bake"):
        assert re.search(rf"^\s+{re.escape(name)}\s+\S", out.stdout, re.M), name
    assert "Exit codes" in out.stdout
    ver = subprocess.run([sys.executable, "-m", "vllm_hotfix", "--version"], capture_output=True, text=True)
    assert ver.returncode == 0 and re.search(r"\d+\.\d+\.\d+", ver.stdout)


def test_usage_error_is_one_line_exit_2():
    out = subprocess.run([sys.executable, "-m", "vllm_hotfix", "apply", "--bogus"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr

"""Shared fixtures. Every test runs with its own state dir and no inherited HOTFIX_* settings,
so no test can touch the real user's recorded state, catalog or files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import realdata  # noqa: E402
import tiers  # noqa: E402
from fixtures.inprocess import needs_process, run_in_process  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Tiers (tests/tiers.py): a test that downloads, starts an external tool or the full vLLM without
    declaring its marker fails; plain `pytest` runs the unmarked tier only."""
    config.pluginmanager.register(tiers, "tiers")


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    state = tmp_path_factory.mktemp("hotfix-state")
    for var in ("HOTFIX_PYTHON", "HOTFIX_CATALOG", "HOTFIX_LOCK", "HOTFIX_REQUIRE", "HOTFIX_STRICT", "HOTFIX_ALLOW_SHADOW",
                "PYTHONPATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOTFIX_STATE_DIR", str(state))
    monkeypatch.setenv("XDG_STATE_HOME", str(state / "xdg"))
    yield state


@pytest.fixture
def run_hotfix():
    """Run the ``hotfix`` CLI: ``run_hotfix("status", "--json", env={...})`` -> CompletedProcess (returncode,
    stdout, stderr). In this process (fixtures/inprocess.py), unless the process boundary is the point:
    ``process=True`` starts ``python -m vllm_hotfix`` (signals, terminals, closed streams, a new
    interpreter's imports, what its children inherit), as do ``python=`` (another interpreter) and an ``env``
    that changes what an interpreter reads as it starts (``PYTHON*``, ``LANG``, ``LC_*``, ``TMPDIR``)."""

    def run(*args: str, env: dict | None = None, cwd: Path | None = None, input: str | None = None,
            python: str | None = None, process: bool = False) -> subprocess.CompletedProcess:
        if python is None and not process and not needs_process(env):
            return run_in_process(list(args), env=env, cwd=cwd, input=input)
        full_env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}  # xdist workers set them
        if env:
            full_env.update(env)
        return subprocess.run(
            [python or sys.executable, "-m", "vllm_hotfix", *map(str, args)],
            capture_output=True, text=True, env=full_env, cwd=cwd, input=input, timeout=600,
        )

    return run


@pytest.fixture(scope="session")
def vllm_wheel():
    """``vllm_wheel("0.30.0")`` -> Path of the real, cached wheel."""
    return realdata.vllm_wheel


@pytest.fixture(scope="session")
def vllm_template():
    """``vllm_template("0.30.0")`` -> cached venv with that real wheel installed. Read only!"""
    return realdata.vllm_template


@pytest.fixture
def vllm_install(tmp_path):
    """``vllm_install("0.30.0")`` -> a private copy of a real vLLM install, free to modify."""

    def make(version: str = "0.30.0") -> realdata.Venv:
        template = realdata.vllm_template(version)
        return realdata.copy_venv(template, tmp_path / f"venv-{version}")

    return make

"""Test tiers: what a test uses decides its marker, and a test that uses more than it declares fails.

A test declares its tier where it is written: ``pytestmark = pytest.mark.real`` in its module (or a
list of marks), ``@pytest.mark.tools`` on the function, or a folder's ``conftest.py``. Plain
``python -m pytest`` runs only the unmarked, fast tier (``DEFAULT`` below, pyproject's ``addopts``);
``python -m pytest -m ""`` (the README's test command and ``.ci/run``) runs every tier.

- ``real``: a real vLLM wheel, template venv or source tree from the index (``realdata``), or a pip
  install with dependencies from the index;
- ``tools``: an external tool (``TOOLS``: kubectl, the compose binaries, minisign, skopeo, umoci,
  hadolint, check-jsonschema) or a real CEL engine;
- ``vllm_full``: the full vLLM venv with torch (``realdata.vllm_full_venv`` or its interpreter);
- ``container``: a container engine (podman);
- ``slow``: takes more than a few seconds (declared, not detected).

The check runs while the test runs, at the entry points themselves, so it cannot drift from the code:
``realdata``'s entry points (its ``needs`` decorator) and the fixtures that reach a tool or a CEL
engine call :func:`uses`, and every
``subprocess.Popen`` (``subprocess.run`` and friends included) is checked against ``TOOLS`` by the name
of the program it starts. Outside pytest, or outside a test, :func:`uses` does nothing.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

TIERS = ("real", "tools", "vllm_full", "container", "slow")
DEFAULT = " and ".join(f"not {tier}" for tier in TIERS)  # what plain `pytest` runs (pyproject's addopts)

# Programs by the name they are started with -> the tier a test that starts them declares.
TOOLS = {
    "kubectl": "tools", "kustomize": "tools", "docker-compose": "tools", "minisign": "tools", "skopeo": "tools",
    "umoci": "tools", "hadolint": "tools", "check-jsonschema": "tools",
    "podman": "container", "docker": "container", "buildah": "container", "runc": "container",
}

_VIOLATIONS = pytest.StashKey[list]()
_current: pytest.Item | None = None


def declared(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers() if mark.name in TIERS}


def uses(tier: str, what: str) -> None:
    """The running test uses ``what``, which needs ``tier``: fail it unless it declares that tier."""
    item = _current
    if item is None or tier in declared(item):
        return
    message = (f"{item.nodeid} uses {what} but is not marked `{tier}`: declare it where the test is, "
               f"e.g. `pytestmark = pytest.mark.{tier}` in its module (docs/testing.md#tiers)")
    item.stash.setdefault(_VIOLATIONS, []).append(message)
    pytest.fail(message, pytrace=False)  # a BaseException: `except Exception` in the test cannot swallow it


def program(args, kwargs) -> str:
    """The program a ``Popen(args, **kwargs)`` starts, as given (a path or a name)."""
    if kwargs.get("executable"):
        return os.fsdecode(kwargs["executable"])
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        if kwargs.get("shell"):
            words = shlex.split(text)
            return words[0] if words else ""
        return text
    args = list(args)
    return os.fsdecode(args[0]) if args else ""


def check_program(name: str) -> None:
    import realdata

    tier = TOOLS.get(Path(name).name)
    if tier is not None:
        uses(tier, f"the external tool {Path(name).name} ({name})")
    elif name.startswith(str(realdata.VENVS / "vllm-full-")):
        uses("vllm_full", f"the full vLLM venv ({name})")


_real_popen_init = subprocess.Popen.__init__


def _checked_popen_init(self, args, *rest, **kwargs):
    if _current is not None:
        check_program(program(args, kwargs))
    _real_popen_init(self, args, *rest, **kwargs)


def pytest_configure(config):
    import realdata

    realdata.tier_check = uses
    subprocess.Popen.__init__ = _checked_popen_init


def pytest_unconfigure(config):
    import realdata

    realdata.tier_check = None
    subprocess.Popen.__init__ = _real_popen_init


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    _current = item
    try:
        yield
    finally:
        _current = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A use the test swallowed (a caught failure, a thread) still fails it."""
    outcome = yield
    report = outcome.get_result()
    found = item.stash.get(_VIOLATIONS, [])
    if found and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = "\n".join(found)
    item.stash[_VIOLATIONS] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Plain `pytest` leaves the other tiers out (and a file of another tier selects nothing): say so."""
    if config.option.markexpr == DEFAULT:
        terminalreporter.write_line('only the fast tier ran (pyproject\'s `-m` default): `python -m pytest -m ""` '
                                    'runs every tier (docs/testing.md#tiers)')

"""Issue 31, git hardened everywhere: every git vllm-hotfix runs (GitPython and subprocess) gets
install.version.git_env -- no system or global configuration, the checkout's fsmonitor, hooks and pager
off -- and a checkout another user owns is refused in one line (exit 3) before any git runs in it, even
with `safe.directory=*` in the caller's configuration (common in images and CI)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fixtures.gitrepo import git, init_repo
from fixtures.trees import ONE_LINE_PATCH, snapshot

OTHER_UID = 4242


def _checkout_with_fsmonitor(tmp_path: Path) -> tuple[Path, Path]:
    """A --root checkout whose .git/config runs a core.fsmonitor hook that leaves a marker (and a
    post-checkout hook that would too), and the marker's path."""
    root = init_repo(tmp_path / "checkout", {"pkg/__init__.py": "", "pkg/m.py": "a\n",
                                             "pyproject.toml": '[project]\nname = "pkg"\nversion = "1.0"\n'},
                     branch="main", message="base")
    marker = tmp_path / "MARKER"
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    git(root, "config", "core.fsmonitor", str(hook))
    git(root, "config", "core.pager", f"touch {marker}.pager; cat")
    return root, marker


def _caller_env(tmp_path: Path) -> dict[str, str]:
    """The caller's git configuration as images and CI set it: `safe.directory=*` in ~/.gitconfig."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / ".gitconfig").write_text("[safe]\n\tdirectory = *\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(home))
    return env


def hotfix(*args, env) -> subprocess.CompletedProcess:
    import sys

    return subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_the_fixture_hook_really_runs_under_plain_git(tmp_path):
    """The control: plain git with the caller's configuration runs the checkout's fsmonitor."""
    root, marker = _checkout_with_fsmonitor(tmp_path)
    (root / "pkg" / "m.py").write_text("changed\n")
    subprocess.run(["git", "-C", str(root), "status"], env=_caller_env(tmp_path), capture_output=True)
    assert marker.exists()


def test_our_own_checkout_never_runs_its_fsmonitor_hooks_or_pager(tmp_path):
    root, marker = _checkout_with_fsmonitor(tmp_path)
    patch = tmp_path / "m.diff"
    patch.write_bytes(ONE_LINE_PATCH)
    env = {**_caller_env(tmp_path), "HOTFIX_STATE_DIR": str(tmp_path / "state")}
    for command in (("status", "--root", root),
                    ("apply", "--patch", patch, "--root", root, "--dry-run"), ("apply", "--patch", patch, "--root", root),
                    ("status", "--root", root), ("rollback", "m", "--root", root)):
        done = hotfix(*command, env=env)
        assert done.returncode == 0, (command, done.stderr)
    assert not marker.exists() and not Path(f"{marker}.pager").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's checkout needs root (os.chown)")
def test_a_checkout_another_user_owns_is_refused_in_one_line_whatever_safe_directory_says(tmp_path):
    root, marker = _checkout_with_fsmonitor(tmp_path)
    head = git(root, "rev-parse", "HEAD").strip()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), OTHER_UID, OTHER_UID)
    patch = tmp_path / "m.diff"
    patch.write_bytes(ONE_LINE_PATCH)
    env = {**_caller_env(tmp_path), "HOTFIX_STATE_DIR": str(tmp_path / "state")}
    from fixtures.manifests import write_patch_catalog

    catalog = write_patch_catalog(tmp_path / "catalog", "pinned", ONE_LINE_PATCH, distribution="pkg", versions=">=1.0",
                                  fixed_in=None, title="A hotfix on a git baseline")
    manifest = catalog / "manifests" / "pinned.toml"
    manifest.write_text(manifest.read_text().replace('versions = ">=1.0"', f'versions = ">=1.0"\ngit = {{ commit = "{head}" }}'))
    before = snapshot(root)
    for command in (("apply", "pinned", "--root", root, "--catalog", catalog),
                    ("apply", "pinned", "--root", root, "--catalog", catalog, "--dry-run")):
        done = hotfix(*command, env=env)
        errors = [line for line in done.stderr.splitlines() if line.startswith("hotfix: error: ")]
        assert done.returncode == 3, (command, done.returncode, done.stderr)
        assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"is owned by uid {OTHER_UID}" in errors[0] and "dubious ownership" in errors[0], errors[0]
    done = hotfix("status", "--root", root, env=env)  # a view: it says what it could not check, in one line
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("hotfix: ")]
    assert f"is owned by uid {OTHER_UID}" in warning and "dubious ownership" in warning
    assert not marker.exists() and not Path(f"{marker}.pager").exists()
    assert snapshot(root) == before


def test_git_env_drops_the_callers_configuration_and_turns_the_hooks_off(monkeypatch):
    from vllm_hotfix_guard.install.version import git_env

    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'safe.directory'='*'")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    env = git_env()
    assert "GIT_CONFIG_PARAMETERS" not in env
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == os.devnull
    pairs = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert pairs["core.fsmonitor"] == "false" and pairs["core.hooksPath"] == os.devnull
    shown = subprocess.run(["git", "config", "--show-scope", "--list"], env=env, capture_output=True, text=True, cwd="/")
    assert all(line.startswith("command") for line in shown.stdout.splitlines()), shown.stdout

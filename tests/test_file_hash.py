"""inputs.file_sha256: the one bounded file hash (never through a symlink, never blocking, capped), and
the callers that go through it (txn/fsops, txn/hotfix_lock, catalog/wheelcache)."""

import hashlib
import os

import pytest

from vllm_hotfix_guard.inputs import Unfit, file_sha256
from vllm_hotfix_guard.txn import fsops, lock_check

DATA = b"x = 1\n" * 1000


def test_a_regular_file_hashes_to_its_bytes_sha256(tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(DATA)
    assert file_sha256(path, cap=len(DATA), what="file") == hashlib.sha256(DATA).hexdigest()
    assert fsops.file_sha256(path) == lock_check.sha256_file(path) == hashlib.sha256(DATA).hexdigest()


def test_a_symlink_is_refused_not_followed(tmp_path):
    (tmp_path / "real.py").write_bytes(DATA)
    link = tmp_path / "link.py"
    link.symlink_to(tmp_path / "real.py")
    with pytest.raises(Unfit) as refused:
        file_sha256(link, cap=1 << 20, what="file")
    assert refused.value.why == "link"
    assert fsops.file_sha256(link) == fsops.NOT_REGULAR
    assert lock_check.sha256_file(link) is None


def test_a_file_over_the_cap_is_refused(tmp_path):
    path = tmp_path / "big.py"
    path.write_bytes(DATA)
    with pytest.raises(Unfit) as refused:
        file_sha256(path, cap=len(DATA) - 1, what="file")
    assert refused.value.why == "large"


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(Unfit) as refused:
        file_sha256(fifo, cap=1 << 20, what="file")
    assert refused.value.why == "special"


def test_an_absent_file_is_the_callers_to_word(tmp_path):
    with pytest.raises(FileNotFoundError):
        file_sha256(tmp_path / "absent", cap=1 << 20, what="file")
    assert fsops.file_sha256(tmp_path / "absent") is None
    assert lock_check.sha256_file(tmp_path / "absent") is None


def test_no_module_hashes_a_file_its_own_way():
    """One bounded file hash: besides inputs.file_sha256, no function of src/ opens a file to feed hashlib
    (a download is hashed as it arrives, and so is an OCI layer as it is inflated from bytes already read,
    containers/oci_layer.py; data already read is hashed by hashlib.sha256(data))."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"  # both packages
    own = [p.relative_to(src).as_posix() for p in src.rglob("*.py")
           if "hashlib.sha256()" in p.read_text(encoding="utf-8")]
    assert sorted(own) == ["vllm_hotfix/catalog/wheelindex.py", "vllm_hotfix/containers/oci_layer.py",
                           "vllm_hotfix_guard/filehash.py"]

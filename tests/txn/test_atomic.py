import os

import pytest

from vllm_hotfix_guard.txn import atomic
from vllm_hotfix_guard.txn.atomic import atomic_write


def test_atomic_write_creates_and_replaces_keeping_mode(tmp_path):
    target = tmp_path / "state.json"
    atomic_write(target, b"one")
    assert target.read_bytes() == b"one"
    os.chmod(target, 0o600)
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert os.stat(target).st_mode & 0o777 == 0o600
    atomic_write(target, b"three", mode=0o755)
    assert os.stat(target).st_mode & 0o777 == 0o755
    assert os.listdir(tmp_path) == ["state.json"]


def test_atomic_write_leaves_no_temp_and_old_content_on_error(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    target.write_bytes(b"old")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(OSError):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state.json"]

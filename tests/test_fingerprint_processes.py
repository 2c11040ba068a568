"""One fingerprint: equal installs at different paths agree, one byte differs it, and every guarded
process (spawned, as vLLM starts its engine core and workers) logs the same one."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedFile, LockedHotfix, dump_lock, load_lock
from vllm_hotfix_guard.txn.lock_check import Installed, check_lock, fingerprint
from vllm_hotfix_guard.core.fingerprint import NONE
from vllm_hotfix_guard.errors import InvalidInput

from fixtures.codenames import locked_code

PKG = "fphotfixpkg"
FILES = {f"{PKG}/__init__.py": b"", f"{PKG}/layer.py": b"x = 1  # patched\n", f"{PKG}/util.py": b"y = 2  # patched\n"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_install(root: Path) -> Path:
    site = root / "lib" / "site-packages"
    for rel, data in FILES.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    info = site / f"{PKG}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PKG}\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in FILES) + f"{PKG}-1.0.dist-info/RECORD,,\n")
    return site


def write_lock(path: Path) -> Path:
    files = tuple(LockedFile(rel, sha(data), None, rel, locked_code(rel, b"", data) if rel.endswith(".py") else None)
                  for rel, data in FILES.items() if data)
    lock = Lock("/opt/venv/lib/site-packages", (LockedHotfix("fp-fix", 1, PKG, PKG, "1.0", None, files),))
    path.write_bytes(dump_lock(lock))
    return path


def lock_fingerprint(path: str, resolve) -> str:
    """The fingerprint of the lock at ``path`` as ``resolve`` finds its packages (hf1-none without a
    readable lock), from hotfix_lock's and lock_check's public pieces: what verify --lock and the guard compute."""
    try:
        return fingerprint(check_lock(load_lock(Path(path)), resolve))
    except InvalidInput:
        return NONE


def resolver(site: Path):
    return lambda package: Installed(site / package, "1.0")


def test_identical_installs_at_different_paths_agree_one_byte_differs(tmp_path):
    lock = write_lock(tmp_path / "hotfix.lock")
    one, two = make_install(tmp_path / "venv-one"), make_install(tmp_path / "elsewhere" / "venv-two")
    first = lock_fingerprint(str(lock), resolver(one))
    assert first.startswith("hf1-") and first != "hf1-none"
    assert lock_fingerprint(str(lock), resolver(two)) == first
    layer = two / PKG / "layer.py"
    layer.write_bytes(layer.read_bytes().replace(b"1", b"2"))
    assert lock_fingerprint(str(lock), resolver(two)) != first
    assert lock_fingerprint(str(tmp_path / "absent.lock"), resolver(one)) == "hf1-none"


SPAWN = textwrap.dedent('''
    import logging, multiprocessing, sys

    def child():
        logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
        from vllm_hotfix_guard import plugin as guard
        guard.register()

    if __name__ == "__main__":
        context = multiprocessing.get_context("spawn")
        for name in ("EngineCore_DP0", "VllmWorker-0"):
            process = context.Process(target=child, name=name)
            process.start()
            process.join()
            assert process.exitcode == 0, process.exitcode
''')


def test_two_spawned_processes_log_the_same_fingerprint(tmp_path):
    site = make_install(tmp_path / "venv")
    lock = write_lock(tmp_path / "hotfix.lock")
    script = tmp_path / "spawn.py"
    script.write_text(SPAWN)
    env = dict(os.environ, HOTFIX_LOCK=str(lock), HOTFIX_STRICT="1", HOTFIX_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=os.pathsep.join([str(site), *sys.path[1:]]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "vllm-hotfix guard pid=" in line]
    assert len(lines) == 2, done.stderr
    assert "role=EngineCore_DP0 " in lines[0] and "role=VllmWorker-0 " in lines[1]
    prints = {line.split("fingerprint=")[1].split(":")[0] for line in lines}
    assert prints == {lock_fingerprint(str(lock), resolver(site))}
    assert all(line.endswith("fp-fix [lock] in effect") for line in lines)

"""The lock verdict cache (vllm_hotfix_guard/lock_cache.py, issue 43's budget): a container's later processes take
the first one's verdict on HOTFIX_LOCK -- and answer exactly as a derivation does, whatever changed in between.

The differential test: in a wheel-like install (a package, its dist-info, a lock with code names), one process
leaves an entry; then each change a rebuild, a hand, pip or Python can make (the locked file edited with its size
kept, deleted, a stale pyc, a shadowing copy earlier on sys.path, the version in METADATA, an interrupted apply's
journal, the lock's bytes, a signature file beside it, another working directory) is made, and the process that
finds the entry must print the very verdicts a process without any cache prints. The real vLLM loader:
tests/test_guard_vllm_trust.py (k8s --trust) and benchmarks/guard.py --part ready."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.codenames import code_of

PACKAGE, HOTFIX = "hfcachepkg", "cache-test-fix"
BEFORE = b"def compute(x):\n    return x + 1\n"
AFTER = b"def compute(x):\n    return x + 2  # fixed\n"
PROBE = r'''
import json, sys
from vllm_hotfix_guard import plugin
plugin.register()
print(json.dumps({"verdicts": [v.as_dict() for v in plugin._last_check[1]], "fingerprint": plugin._last_check[2],
                  "derived": "vllm_hotfix_guard.txn.hotfix_lock" in sys.modules}))
'''


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def install(site: Path) -> None:
    """PACKAGE 1.0 as pip leaves a wheel: the package and its dist-info (the patched module)."""
    pkg = site / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_bytes(b"")
    (pkg / "mod.py").write_bytes(AFTER)
    info = site / f"{PACKAGE}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n\n")
    (info / "top_level.txt").write_text(f"{PACKAGE}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(f"{PACKAGE}/__init__.py,,\n{PACKAGE}/mod.py,,\n")


def write_lock(path: Path) -> Path:
    rel = f"{PACKAGE}/mod.py"
    path.write_text(json.dumps({"schema": 1, "site_packages": "/x", "hotfixes": [
        {"id": HOTFIX, "version": 1, "distribution": PACKAGE, "package": PACKAGE, "baseline_version": "1.0",
         "fixed_in": None, "files": [{"path": rel, "sha256": sha(AFTER), "baseline_sha256": sha(BEFORE),
                                      "export": f"{HOTFIX}/{rel}", "code": code_of(rel, BEFORE, AFTER)}]}]}))
    return path


@pytest.fixture
def world(tmp_path):
    site, early = tmp_path / "site", tmp_path / "early"
    install(site)
    early.mkdir()
    lock = write_lock(tmp_path / "etc" / "hotfix.lock") if (tmp_path / "etc").mkdir() is None else None
    ready = tmp_path / "ready"
    ready.mkdir(mode=0o700)
    old = time.time() - 10  # older than the racy window, as an image's files are
    for path in [p for p in tmp_path.rglob("*")] + [tmp_path]:
        os.utime(path, (old, old), follow_symlinks=False)
    time.sleep(1.1)  # ctimes cannot be set back: let them age past lock_cache.RACY_NS
    return {"site": site, "early": early, "lock": lock, "ready": ready, "state": tmp_path / "state", "cwd": tmp_path}


def guard(world, *, cached: bool, cwd=None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTFIX_")}
    env.update(PYTHONPATH=os.pathsep.join([str(world["early"]), str(world["site"])]), HOTFIX_LOCK=str(world["lock"]),
               HOTFIX_STATE_DIR=str(world["state"]), PYTHONDONTWRITEBYTECODE="1")
    if cached:
        env["HOTFIX_READY_DIR"] = str(world["ready"])
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env,
                          cwd=cwd or world["cwd"])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def entries(world) -> list[Path]:
    return sorted((world["ready"] / "lock-verdicts").glob("*.json"))


def test_a_later_process_takes_the_verdict_without_deriving_it(world):
    first = guard(world, cached=True)
    assert first["derived"] and all(v["in_effect"] for v in first["verdicts"])
    assert len(entries(world)) == 1
    second = guard(world, cached=True)
    assert not second["derived"]  # no lock parser, no install finder, no verdict rules imported
    assert second["verdicts"] == first["verdicts"] == guard(world, cached=False)["verdicts"]
    assert second["fingerprint"] == first["fingerprint"]


def _edit_in_place(world):
    mod = world["site"] / PACKAGE / "mod.py"
    with open(mod, "r+b") as fh:  # same size, same inode
        fh.write(AFTER.replace(b"+ 2", b"+ 3"))


def _stale_pyc(world):
    mod = world["site"] / PACKAGE / "mod.py"
    source = world["cwd"] / "old.py"
    source.write_bytes(BEFORE.ljust(len(AFTER), b" "))
    import py_compile
    from importlib.util import cache_from_source

    target = cache_from_source(str(mod))
    py_compile.compile(str(source), cfile=target, doraise=True)
    stat = mod.stat()
    data = bytearray(Path(target).read_bytes())  # a header naming the patched file's mtime and size
    data[8:12] = (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    data[12:16] = (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    Path(target).write_bytes(bytes(data))


def _shadow(world):
    copy = world["early"] / PACKAGE
    copy.mkdir()
    (copy / "__init__.py").write_bytes(b"")
    (copy / "mod.py").write_bytes(BEFORE)


def _version(world):
    meta = world["site"] / f"{PACKAGE}-1.0.dist-info" / "METADATA"
    with open(meta, "r+b") as fh:
        fh.write(meta.read_bytes().replace(b"Version: 1.0", b"Version: 2.0"))


def _journal(world):
    from vllm_hotfix_guard.paths import TargetDir

    os.environ["HOTFIX_STATE_DIR"] = str(world["state"])
    try:
        journal = TargetDir.of(world["site"]).journal_file
    finally:
        del os.environ["HOTFIX_STATE_DIR"]
    journal.parent.mkdir(parents=True)
    journal.write_text("{}")


def _lock_bytes(world):
    world["lock"].write_text(world["lock"].read_text().replace('"version": 1', '"version": 2'))


def _signature(world):
    (world["lock"].parent / "hotfix.lock.minisig").write_text("untrusted comment: x\nAAAA\n")


CHANGES = {
    "edited-in-place": _edit_in_place,
    "deleted": lambda w: (w["site"] / PACKAGE / "mod.py").unlink(),
    "stale-pyc": _stale_pyc,
    "shadowed-earlier-on-sys-path": _shadow,
    "version-in-metadata": _version,
    "interrupted-journal": _journal,
    "other-lock-bytes": _lock_bytes,
    "signature-beside-the-lock": _signature,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_after_any_change_the_cache_answers_as_a_derivation(world, change):
    assert guard(world, cached=True)["derived"] and len(entries(world)) == 1
    CHANGES[change](world)
    derived = guard(world, cached=False)
    cached = guard(world, cached=True)
    assert cached["verdicts"] == derived["verdicts"], change
    assert cached["fingerprint"] == derived["fingerprint"], change
    assert cached["derived"], change  # the entry did not hold: derived again


def test_another_working_directory_or_an_entry_not_fit_is_a_derivation(world, tmp_path):
    guard(world, cached=True)
    (entry,) = entries(world)
    assert guard(world, cached=True, cwd=world["site"])["derived"]  # sys.path's '' is another directory
    forged = (entry.read_text().replace("true", "false"), "[" * 200_000 + "]" * 200_000, '{"schema": 1}')
    for mode, text in ((0o644, None), *((0o600, f) for f in forged)):
        doc = entry.read_text() if text is None else text
        entry.unlink()
        entry.write_text(doc)
        entry.chmod(mode)
        assert guard(world, cached=True)["derived"], (mode, text)
    entry.unlink()
    entry.symlink_to(tmp_path / "elsewhere.json")
    assert guard(world, cached=True)["derived"]


def test_a_racy_install_is_not_kept(tmp_path, world):
    (world["site"] / PACKAGE / "__init__.py").write_bytes(b"# just written\n")
    assert guard(world, cached=True)["derived"]
    assert entries(world) == []  # a stat younger than the clock's tick may hide the next change


def test_the_hit_path_s_copy_of_a_constant_holds():
    """What a hit uses without importing the module that owns it: the fingerprint of nothing."""
    import inspect

    from vllm_hotfix_guard import plugin
    from vllm_hotfix_guard.core.fingerprint import NONE

    assert f'fingerprint = "{NONE}"' in inspect.getsource(plugin._check_here)

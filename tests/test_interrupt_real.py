"""Issue 21: SIGINT / SIGTERM during the write phase of the real 0.29.0 -> 0.30.0 diff (1,106 files,
206,677 lines), at several moments after the first temp file appears: no `*.hotfix-tmp` is ever left,
and the exit code says what happened -- 130 / 143 with every file and the record as before, or 0 with
the change complete and recorded (a signal after the commit point does not undo it, and is not a
failure). `hotfix recover` finds nothing to do afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import realdata

pytestmark = [pytest.mark.real, pytest.mark.slow]

FIRST_DIR = "vllm"  # the diff's first file (vllm/_aiter_ops.py) is written here first


def digest_tree(root: Path, touched: frozenset[str] = frozenset()) -> dict[str, str | None]:
    """Every path under root; the sha256 of those in ``touched`` (the files the diff names), whose
    bytes are all the apply may change (the rest are not read: 105 MB per look)."""
    found: dict[str, str | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            found[rel] = None
            if rel in touched:
                with open(path, "rb") as fh:
                    found[rel] = hashlib.sha256(fh.read()).hexdigest()
    return found


def temps(root: Path) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith(".hotfix-tmp")]


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """The pristine 0.29.0 sources, the diff, and the digests before and after a complete apply."""
    old = realdata.vllm_source_tree("0.29.0")
    diff = realdata.vllm_source_diff("0.29.0", "0.30.0")
    work = tmp_path_factory.mktemp("after")
    shutil.copytree(old, work / "root", symlinks=True)
    done = subprocess.run(["git", "apply", "--whitespace=nowarn", str(diff)], cwd=work / "root")
    assert done.returncode == 0
    touched = frozenset(line.split()[2][2:] for line in diff.read_text(errors="replace").splitlines()
                        if line.startswith("diff -ruN "))
    assert len(touched) == 1106
    return old, diff, touched, digest_tree(old, touched), digest_tree(work / "root", touched)


def _start_and_signal(root: Path, diff: Path, env: dict, signum: int, delay: float) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "vllm_hotfix", "apply", "--patch", str(diff), "--root",
                                str(root)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watched = root / FIRST_DIR
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:  # the write phase starts
        if any(name.endswith(".hotfix-tmp") for name in os.listdir(watched)):
            break
        time.sleep(0.0005)
    time.sleep(delay)
    if process.poll() is None:
        process.send_signal(signum)
    return process


@pytest.mark.parametrize("signal_name, code, delays", [("SIGINT", 130, (0.0, 0.005, 0.05, 1.0)),
                                                       ("SIGTERM", 143, (0.0, 0.02, 1.0))])
def test_a_signal_in_the_write_phase_leaves_no_temp_file_and_the_exit_code_says_what_happened(
        trees, tmp_path, signal_name, code, delays):
    old, diff, touched, before, after = trees
    outcomes = set()
    root, state = tmp_path / "root", tmp_path / "state"
    subprocess.run(["cp", "-a", str(old), str(root)], check=True)
    env = {**os.environ, "HOTFIX_STATE_DIR": str(state)}

    def hotfix(*args):
        return subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], env=env, capture_output=True,
                              text=True)

    for delay in delays:
        process = _start_and_signal(root, diff, env, getattr(signal, signal_name), delay)
        out, err = process.communicate(timeout=300)
        assert temps(root) == [], (delay, err)
        now = digest_tree(root, touched)
        recorded = [s for s in json.loads(hotfix("status", "--root", root, "--json").stdout) if s["recorded"]]
        assert list(state.glob("targets/*/journal/journal.json")) == [], delay
        if process.returncode == code:
            assert f"interrupted by {signal_name}; every file was restored, nothing was changed" in err, err
            assert now == before and recorded == [], delay
            outcomes.add("restored")
        else:
            assert process.returncode == 0, (delay, process.returncode, err)
            assert now == after, delay
            assert [(s["id"], s["state"]) for s in recorded] == [(diff.stem, "applied")], delay
            outcomes.add("late" if "arrived after the change was committed" in err else "complete")
        recover = hotfix("recover", "--root", root)
        assert recover.returncode == 0 and recover.stdout.startswith("nothing to recover"), recover.stdout
        if now == after:  # back to the pristine tree for the next timing, through the record
            assert hotfix("rollback", diff.stem, "--root", root).returncode == 0
            assert digest_tree(root, touched) == before and temps(root) == []
    assert "restored" in outcomes, outcomes  # at least one signal landed inside the write phase

"""Lines no log may hang doctor with (issue 23): each runs in a subprocess with a generous timeout, so
a regression fails instead of hanging the suite; no time is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from test_manifest import manifest_data, write_manifest

HOSTILE = {  # the lines of the issue, written to a log around a real crash line
    "all_gather-440KB": "(Worker_TP0 pid=1) ERROR 12-01 00:00:00 [x.py:1] " + "all_gather " * 40_000 + "\n",
    "signal_pads-300KB": "(Worker_TP0 pid=1) ERROR 12-01 00:00:00 [x.py:1] cuMemFree(" + "x(" * 150_000 + "\n",
    "a-repeated-300KB": "ERROR " + "a" * 300_000 + "b\n",
}


def run_doctor(tmp_path, log_text: str, *args: str, timeout: float = 120):
    log = tmp_path / "hostile.log"
    log.write_text("RuntimeError: CUDA driver error: CUDA_ERROR_ILLEGAL_ADDRESS (700)\n" + log_text)
    env = {**os.environ, "HOTFIX_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "vllm_hotfix", "doctor", str(log), "--json", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_lines_against_the_built_in_catalog_finish(tmp_path, name):
    done = run_doctor(tmp_path, HOSTILE[name])
    assert done.returncode in (0, 1, 9), done.stderr
    report = json.loads(done.stdout)
    assert report["long_lines"] == 1 and report["lines"] == 2


def test_a_catalog_signature_that_backtracks_is_refused_at_load_with_exit_8(tmp_path):
    catalog = tmp_path / "catalog"
    write_manifest(catalog, manifest_data(id="hostile", signatures=[
        {"pattern": "ERROR (a+)+$", "role": "first-error", "explain": "x"}]), name="hostile")
    done = run_doctor(tmp_path, HOSTILE["a-repeated-300KB"], "--catalog", str(catalog))
    assert done.returncode == 8, done.stdout + done.stderr
    assert "hostile.toml: signatures[0].pattern: a repetition of varying count inside another repetition" in done.stderr


def test_the_same_shape_written_without_nesting_loads_and_finishes(tmp_path):
    catalog = tmp_path / "catalog"
    write_manifest(catalog, manifest_data(id="linear", signatures=[
        {"pattern": "ERROR a+$", "role": "first-error", "explain": "x"},
        {"pattern": r"all_gather\b.*\bcount\b", "role": "first-error", "explain": "x"},
        {"pattern": r"cuMemFree\(.*signal_pads", "role": "traceback", "tier": "specific", "explain": "x"}]), name="linear")
    for name in HOSTILE:
        done = run_doctor(tmp_path, HOSTILE[name], "--catalog", str(catalog))
        assert done.returncode in (1, 9), (name, done.stderr)


def test_matching_uses_re2_here():
    from vllm_hotfix.catalog.signatures import engine

    assert engine() == "re2"  # google-re2 is a dependency (wheels for CPython 3.10-3.13 on x86_64 / aarch64)


@pytest.mark.parametrize("name", HOSTILE)
def test_without_re2_and_ahocorasick_the_fallbacks_finish_too(tmp_path, name):
    """A platform without the wheels: Python's re on lines cut at 8 KB, bytes.find as the prefilter."""
    log = tmp_path / "hostile.log"
    log.write_text("RuntimeError: CUDA driver error: CUDA_ERROR_ILLEGAL_ADDRESS (700)\n" + HOSTILE[name])
    code = ("import sys; sys.modules['re2'] = None; sys.modules['ahocorasick_rs'] = None\n"
            "from vllm_hotfix.catalog.signatures import engine; assert engine() == 're', engine()\n"
            "from vllm_hotfix.cli import main; sys.argv = ['hotfix', 'doctor', sys.argv[1], '--json']; main()")
    env = {**os.environ, "HOTFIX_STATE_DIR": str(tmp_path / "state"), "HOTFIX_DOCTOR_PREFILTER": "python"}
    done = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode in (0, 1, 9), done.stderr
    assert json.loads(done.stdout)["long_lines"] == 1

"""One verdict: the same files get the same state word and exit code from status, verify, verify --lock,
the in-process guard, and apply (which refuses a drifted target), on real vLLM installs.

The hotfix is a catalog hotfix of two real files of vLLM 0.30.0 (range ==0.30.0, fixed in 0.32.0).
The lock is exported once from a pristine install; a lock is a record of what must be there, so on a
target where nothing was applied it reads `lost` (the mount is missing), as `status` reads a record
whose files are all back to their baseline.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import realdata
from fixtures import crash
from fixtures.manifests import write_patch_catalog
from fixtures.twofiles import ENVS, VERSION, make_two_file_patch, snapshot

pytestmark = pytest.mark.slow

HOTFIX = "two-files"
SRC = Path(__file__).resolve().parents[2] / "src"

#            status            verify lock               guard-lock        guard-require   apply exit
MATRIX = {
    "not-applied":    ("not-applied", 1, "lost", 1, "lost", None, 0),
    "applied":        ("applied", 0, "applied", 0, "applied", "applied", 0),
    "lost":           ("lost", 1, "lost", 1, "lost", "lost", 0),
    "drifted":        ("drifted", 1, "drifted", 1, "drifted", "drifted", 3),
    "half-lost":      ("drifted", 1, "drifted", 1, "drifted", "drifted", 3),
    "fixed-upstream": ("fixed-upstream", 0, "fixed-upstream", 0, "fixed-upstream", None, 5),
    "not-applicable": ("not-applicable", 1, "not-applicable", 1, "not-applicable", None, 3),
    "interrupted":    ("interrupted", 1, "interrupted", 1, "interrupted", "interrupted", 0),
}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    base = tmp_path_factory.mktemp("matrix")
    template = realdata.vllm_template("0.30.0")
    patch = make_two_file_patch(template.site_packages, base / "diff")
    data = patch.read_bytes()
    root = write_patch_catalog(base / "catalog", HOTFIX, data, distribution="vllm",
                                  versions="==0.30.0", fixed_in="0.32.0", file="0.30.patch",
                                  title="Two files of vLLM 0.30.0", extra="strip = 1\n")
    return root


@pytest.fixture(scope="module")
def lock(catalog, tmp_path_factory):
    venv = realdata.copy_venv(realdata.vllm_template("0.30.0"), tmp_path_factory.mktemp("pristine") / "venv")
    out = tmp_path_factory.mktemp("export")
    done = subprocess.run(crash.hotfix_argv("export", HOTFIX, "--to", out, "--python", venv.python,
                                            "--catalog", catalog), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out / "hotfix.lock"


def guard(python: Path, *, lock: Path | None, require: str | None) -> dict:
    code = (f"import sys, json; sys.path.append({str(SRC)!r}); from vllm_hotfix.containers.guard import check; "
            f"print(json.dumps([v.__dict__ for v in check(lock={str(lock) if lock else None!r}, "
            f"require={(require,) if require else ()!r})]))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (verdict,) = json.loads(done.stdout)
    return verdict


@pytest.mark.parametrize("row", list(MATRIX))
def test_one_word_per_row(row, catalog, lock, vllm_install, run_hotfix, tmp_path):
    version = {"fixed-upstream": "0.32.0", "not-applicable": "0.31.0"}.get(row, "0.30.0")
    venv = vllm_install(version)
    sp = venv.site_packages
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    pristine = snapshot(sp) if version == "0.30.0" else None
    if row in ("applied", "lost", "drifted", "half-lost"):
        assert run_hotfix("apply", HOTFIX, *options).returncode == 0
    if row == "lost":  # a real reinstall of the same release, as a container rebuild does
        realdata.pip_install(venv, "--force-reinstall", str(realdata.vllm_wheel("0.30.0")))
        assert snapshot(sp) == pristine
    if row == "drifted":
        path = sp / ENVS
        path.write_bytes(path.read_bytes().replace(b"marker one", b"marker edited by hand"))
    if row == "half-lost":
        (sp / VERSION).write_bytes(pristine[VERSION])
    if row == "interrupted":
        argv = crash.hotfix_argv("apply", HOTFIX, *options)
        at = crash.after_switching(argv, sp / ENVS, tmp_path / "trace.log")
        assert run_hotfix("apply", HOTFIX, *options).returncode == 0
        assert run_hotfix("rollback", HOTFIX, *options).returncode == 0
        killed = crash.run_with(argv, "rename", at, "signal=SIGKILL")
        assert killed.returncode != 0

    word, verify_code, lock_word, lock_code, guard_lock, guard_require, apply_code = MATRIX[row]
    done = run_hotfix("status", HOTFIX, *options, "--json")
    (entry,) = json.loads(done.stdout)
    assert (entry["state"], done.returncode) == (word, verify_code), (row, entry)
    assert run_hotfix("verify", HOTFIX, *options).returncode == verify_code
    done = run_hotfix("verify", "--lock", lock, "--python", venv.python, "--json")
    (locked,) = json.loads(done.stdout)
    assert (locked["state"], done.returncode) == (lock_word, lock_code), (row, locked)

    verdict = guard(venv.python, lock=lock, require=None)
    assert verdict["in_effect"] == (lock_word in ("applied", "fixed-upstream")), verdict
    if not verdict["in_effect"]:
        assert verdict["detail"].startswith(f"{guard_lock}:"), verdict
    if guard_require is not None:
        verdict = guard(venv.python, lock=None, require=HOTFIX)
        assert verdict["in_effect"] == (guard_require == "applied"), verdict
        if not verdict["in_effect"]:
            assert verdict["detail"].startswith(f"{guard_require}:"), verdict

    applied = run_hotfix("apply", HOTFIX, *options)
    assert applied.returncode == apply_code, (row, applied.stderr)
    if row in ("drifted", "half-lost"):
        assert "is drifted on" in applied.stderr and "then apply again" in applied.stderr
    if apply_code == 0:
        (entry,) = json.loads(run_hotfix("status", HOTFIX, *options, "--json").stdout)
        assert entry["state"] == "applied", entry

"""One verdict: the same files get the same state word and exit code from status, verify, verify --lock,
the in-process guard (with a lock and with HOTFIX_REQUIRE), doctor's join with the target, export and
apply (which refuses a drifted target), on real vLLM installs.

The hotfix is a catalog hotfix of two real files of vLLM (range >=0.30.0,<0.32.0, fixed in 0.32.0), and
``top-note`` a second one on top of it in one of the same files. Locks are exported once from a pristine
0.30.0: one of two-files alone, one of the series two-files + top-note. A lock is a record of what must
be there, so on a target where nothing was applied it reads `lost` (the mount is missing), as `status`
reads a record whose files are all back to their baseline.

Two rows are the disagreements a review confirmed before the one verdict: the release changed under the
record while the files hold the patched bytes (`release-changed`: lost everywhere, the record and the
lock describe another release's bytes), and a hotfix that deletes a file with every file back, the
deleted one included (test_deleted_file_back_is_lost_everywhere).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import realdata
from fixtures import crash
from fixtures.series import edit_diff, write_catalog
from fixtures.twofiles import ENVS, VERSION, make_two_file_patch, snapshot

pytestmark = pytest.mark.slow

HOTFIX = "two-files"
SRC = Path(__file__).resolve().parents[2] / "src"
SIGNATURE = """
[[signatures]]
pattern = 'two-files test crash marker'
role = "error-line"
tier = "specific"
weight = 0.6
explain = "the test crash this hotfix fixes"
"""
LOG = "ERROR 12-01 10:00:05 [core.py:868] EngineCore encountered a fatal error.\n" \
      "ERROR 12-01 10:00:05 [core.py:868] RuntimeError: two-files test crash marker\n"

# the word each reader gives (None: that reader has nothing to say: no record to require), and exit codes
COLUMNS = ("status", "verify", "lock", "lock_exit", "guard_lock", "guard_require", "doctor", "export", "apply")
MATRIX = {
    "not-applied":     ("not-applied", 1, "lost", 1, "lost", None, "not-applied", 0, 0),
    "applied":         ("applied", 0, "applied", 0, "applied", "applied", "applied", 0, 0),
    "applied-under":   ("applied", 0, "applied", 0, "applied", "applied", "applied", 0, 0),
    "lost":            ("lost", 1, "lost", 1, "lost", "lost", "lost", 0, 0),
    "drifted":         ("drifted", 1, "drifted", 1, "drifted", "drifted", "drifted", 3, 3),
    "half-lost":       ("drifted", 1, "drifted", 1, "drifted", "drifted", "drifted", 0, 3),
    "release-changed": ("lost", 1, "lost", 1, "lost", "lost", "lost", 3, 3),
    "fixed-upstream":  ("fixed-upstream", 0, "fixed-upstream", 0, "fixed-upstream", None, "fixed-upstream", 5, 5),
    "not-applicable":  ("not-applicable", 1, "not-applicable", 1, "not-applicable", None, "not-applicable", 3, 3),
    "interrupted":     ("interrupted", 1, "interrupted", 1, "interrupted", "interrupted", "interrupted", 3, 0),
}
VERSION_OF = {"fixed-upstream": "0.32.0", "not-applicable": "0.25.0"}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    base = tmp_path_factory.mktemp("matrix")
    template = realdata.vllm_template("0.30.0")
    two = make_two_file_patch(template.site_packages, base / "diff").read_bytes()
    envs = (template.site_packages / ENVS).read_bytes()
    last = envs.splitlines(keepends=True)[-1]
    top = edit_diff({ENVS: envs}, {ENVS: (last, last + b"# top-note: a second hotfix of this file\n")}, base / "top")
    catalog = write_catalog(base / "catalog", {HOTFIX: (two, SIGNATURE), "top-note": (top, "")})
    for hotfix_id in (HOTFIX, "top-note"):  # the range: 0.31.0 is in it, for the release-changed row
        manifest = catalog / "manifests" / f"{hotfix_id}.toml"
        manifest.write_text(manifest.read_text().replace('versions = "==0.30.0"', 'versions = ">=0.30.0,<0.32.0"'))
    (base / "crash.log").write_text(LOG)
    return catalog


def export(catalog, tmp_path_factory, *ids) -> Path:
    venv = realdata.copy_venv(realdata.vllm_template("0.30.0"), tmp_path_factory.mktemp("pristine") / "venv")
    out = tmp_path_factory.mktemp("export")
    done = subprocess.run(crash.hotfix_argv("export", *ids, "--to", out, "--python", venv.python, "--catalog", catalog),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out / "hotfix.lock"


@pytest.fixture(scope="module")
def locks(catalog, tmp_path_factory):
    return {"one": export(catalog, tmp_path_factory, HOTFIX), "series": export(catalog, tmp_path_factory, HOTFIX, "top-note")}


def guard(python: Path, *, lock: Path | None, require: str | None) -> dict:
    code = (f"import sys, json; sys.path.append({str(SRC)!r}); from vllm_hotfix.containers.guard import check; "
            f"print(json.dumps([v.as_dict() for v in check(lock={str(lock) if lock else None!r}, "
            f"require={(require,) if require else ()!r})]))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[0]


def make_row(row, venv, options, run_hotfix, tmp_path) -> None:
    sp = venv.site_packages
    pristine = snapshot(sp) if row not in VERSION_OF else None
    if row in ("applied", "applied-under", "lost", "drifted", "half-lost", "release-changed"):
        assert run_hotfix("apply", HOTFIX, *options).returncode == 0
    if row == "applied-under":
        assert run_hotfix("apply", "top-note", *options).returncode == 0
    if row == "lost":  # a real reinstall of the same release, as a container rebuild does
        realdata.pip_install(venv, "--force-reinstall", str(realdata.vllm_wheel("0.30.0")))
        assert snapshot(sp) == pristine
    if row == "release-changed":  # another release installed, the patched 0.30.0 files kept (as mounts keep them)
        patched = snapshot(sp)
        realdata.pip_install(venv, "--force-reinstall", str(realdata.vllm_wheel("0.31.0")))
        for rel, data in patched.items():
            (sp / rel).write_bytes(data)
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


def word_of(detail: str) -> str:
    return detail.split(":", 1)[0]


@pytest.mark.parametrize("row", list(MATRIX))
def test_one_word_per_row(row, catalog, locks, vllm_install, run_hotfix, tmp_path):
    venv = vllm_install(VERSION_OF.get(row, "0.30.0"))
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    make_row(row, venv, options, run_hotfix, tmp_path)
    want = dict(zip(COLUMNS, MATRIX[row]))
    lock = locks["series" if row == "applied-under" else "one"]

    done = run_hotfix("status", HOTFIX, *options, "--json")
    (entry,) = json.loads(done.stdout)
    assert (entry["state"], done.returncode) == (want["status"], want["verify"]), (row, entry)
    assert run_hotfix("verify", HOTFIX, *options).returncode == want["verify"]
    done = run_hotfix("verify", "--lock", lock, HOTFIX, "--python", venv.python, "--json")
    (locked,) = json.loads(done.stdout)
    assert (locked["state"], done.returncode) == (want["lock"], want["lock_exit"]), (row, locked)

    verdict = guard(venv.python, lock=lock, require=None)
    assert verdict["in_effect"] == (want["guard_lock"] in ("applied", "fixed-upstream")), verdict
    if not verdict["in_effect"]:
        assert word_of(verdict["detail"]) == want["guard_lock"], verdict
    if want["guard_require"] is not None:
        verdict = guard(venv.python, lock=None, require=HOTFIX)
        assert verdict["in_effect"] == (want["guard_require"] == "applied"), verdict
        if not verdict["in_effect"]:
            assert word_of(verdict["detail"]) == want["guard_require"], verdict

    done = run_hotfix("doctor", catalog.parent / "crash.log", *options, "--json")
    (named,) = [v for v in json.loads(done.stdout)["verdicts"] if v["id"] == HOTFIX]
    assert named["state"] == want["doctor"], (row, named)

    out = tmp_path / "export"
    done = run_hotfix("export", HOTFIX, "--to", out, *options)
    assert done.returncode == want["export"], (row, done.stdout, done.stderr)

    applied = run_hotfix("apply", HOTFIX, *options)
    assert applied.returncode == want["apply"], (row, applied.stderr)
    if row in ("drifted", "half-lost"):
        assert "is drifted on" in applied.stderr and "then apply again" in applied.stderr
    if want["apply"] == 0:
        (entry,) = json.loads(run_hotfix("status", HOTFIX, *options, "--json").stdout)
        assert entry["state"] == "applied", entry


def test_deleted_file_back_is_lost_everywhere(vllm_install, run_hotfix, tmp_path):
    """A hotfix that deletes a file: with every file back, the deleted one included, status and the
    guard's HOTFIX_REQUIRE both say lost (the deleted file gets no special case)."""
    venv = vllm_install("0.30.0")
    sp = venv.site_packages
    gone = "vllm/v1/worker/gpu/README.md"
    before = {rel: (sp / rel).read_bytes() for rel in (ENVS, gone)}
    work = tmp_path / "diff"
    for side in ("a", "b"):
        for rel, data in before.items():
            (work / side / rel).parent.mkdir(parents=True, exist_ok=True)
            if side == "a" or rel == ENVS:
                (work / side / rel).write_bytes(data if side == "a" else b"# deletes a file\n" + data)
    with open(tmp_path / "delete.diff", "wb") as out:
        subprocess.run(["diff", "-ruN", "a", "b"], cwd=work, stdout=out)
    options = ("--python", str(venv.python))
    assert run_hotfix("apply", "--patch", tmp_path / "delete.diff", "--package", "vllm", *options).returncode == 0
    assert not (sp / gone).exists()
    for rel, data in before.items():
        (sp / rel).write_bytes(data)
    (entry,) = json.loads(run_hotfix("status", "delete", *options, "--json").stdout)
    assert entry["state"] == "lost", entry
    verdict = guard(venv.python, lock=None, require="delete")
    assert not verdict["in_effect"] and word_of(verdict["detail"]) == "lost", verdict

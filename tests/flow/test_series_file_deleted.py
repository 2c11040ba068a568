"""A file deleted under a series (issue 45): the unrecorded hotfixes on it were `not-applied` with the advice
`hotfix apply`, which exits 4. status (flow/hotfix_status.status_from_files) now says what the files say --
`drifted`, the file `missing` -- and apply (flow/plan.does_not_apply) agrees; the advice restores the file with
the exact release (flow/restore: pip for a wheel, git for a checkout), then applies in series order, and each
printed step runs as pasted. On real installs: vLLM 0.30.0 with the built-in mamba-align-block-size and a
hotfix that declares `after` it (tests/fixtures/series.py), and the catalog's own series (glm-conv-null-slot,
then glm-conv-null-slot-zero-row) on a git checkout of the real vllm-ascend 0.30.0rc2 sdist."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import realdata
from fixtures.manifests import write_patch_catalog
from fixtures.series import MAMBA, MAMBA_ID, ON_TOP_NEW, ON_TOP_OLD, edit_diff, make_series_catalog

pytestmark = [pytest.mark.real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ON_TOP = "divisor-on-top"
NULL_SLOT, ZERO_ROW = "glm-conv-null-slot", "glm-conv-null-slot-zero-row"
CAUSAL = "vllm_ascend/models/glm5next/ops/causal_conv1d.py"
LOGS = REPO / "tests" / "doctor" / "logs"
MAMBA_LOGS = (LOGS / "001-mamba-align.log", LOGS / "001-dmesg.txt", LOGS / "001-cuda-gdb.txt")  # seed-001 shape


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    template = realdata.vllm_template("0.30.0")
    return make_series_catalog(template.site_packages, tmp_path_factory.mktemp("series"), REPO)


def snapshot(*folders: Path) -> dict:
    """Every file under ``folders``: sha256 of the small ones (sources, records), size and mtime of the rest; not
    the target mutex's empty lock file (txn/mutex.py), which a refused apply may leave."""
    out = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")) if folder.exists() else ():
            if path.is_file() and not path.is_symlink() and path.name != "lock":
                info = path.stat()
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if info.st_size < 1 << 20 else \
                    (info.st_size, info.st_mtime_ns)
    return out


def statuses(run_hotfix, *args) -> tuple[dict, int]:
    done = run_hotfix("status", *args, "--json")
    return {e["id"]: e for e in json.loads(done.stdout)}, done.returncode


def steps(advice: str) -> list[str]:
    return re.findall(r"`([^`]+)`", advice)


def run_step(step: str, run_hotfix, cwd: Path) -> subprocess.CompletedProcess:
    """One printed step, as pasted: a `hotfix` command, pip (from the cached wheels: no download) or git."""
    argv = shlex.split(step)
    if argv[0] == "hotfix":
        return run_hotfix(*argv[1:])
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(realdata.CACHE / "wheels"),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if argv[:3] == ["python3", "-m", "pip"]:
        argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=900)


def test_a_file_deleted_under_the_series_on_a_real_vllm_install(vllm_install, catalog, run_hotfix, tmp_path,
                                                                 _isolated_state):
    """mamba-align-block-size recorded, divisor-on-top (after it) not; mamba_hybrid.py deleted: both `drifted`
    (missing), no `hotfix apply` before the restore; apply and its dry run exit 4 (3 for the drifted record)
    and write nothing; the printed steps -- pip's reinstall of vllm==0.30.0, then the applies in series
    order -- each exit 0 and leave both applied."""
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    assert run_hotfix("apply", MAMBA_ID, *options).returncode == 0
    (venv.site_packages / MAMBA).unlink()
    before = snapshot(venv.site_packages / "vllm", _isolated_state)
    found, code = statuses(run_hotfix, MAMBA_ID, ON_TOP, *options)
    assert code == 1, found
    for hotfix_id in (MAMBA_ID, ON_TOP):
        assert found[hotfix_id]["state"] == "drifted", found[hotfix_id]
        assert "missing" in found[hotfix_id]["detail"], found[hotfix_id]
    assert found[ON_TOP]["files"] == [{"path": MAMBA, "state": "missing"}]
    pip = f"python3 -m pip --python {venv.python} install --force-reinstall --no-deps vllm==0.30.0"
    apply = [f"hotfix apply {hotfix_id} {shlex.join(options)}" for hotfix_id in (MAMBA_ID, ON_TOP)]
    assert steps(found[ON_TOP]["advice"]) == [pip, *apply], found[ON_TOP]["advice"]
    assert steps(found[MAMBA_ID]["advice"]) == [pip, apply[0]], found[MAMBA_ID]["advice"]
    for args, code in (((ON_TOP, "--dry-run"), 4), ((ON_TOP,), 4), ((MAMBA_ID, "--dry-run"), 3), ((MAMBA_ID,), 3)):
        done = run_hotfix("apply", *args, *options)
        assert done.returncode == code, (args, done.stderr)
        assert pip in done.stderr and "roll back" not in done.stderr, done.stderr  # the same restore, no rollback
    text = run_hotfix("status", MAMBA_ID, ON_TOP, *options)
    assert text.returncode == 1 and f"{ON_TOP}" in text.stdout and "not-applied" not in text.stdout, text.stdout
    assert snapshot(venv.site_packages / "vllm", _isolated_state) == before  # nothing else changed
    for step in steps(found[ON_TOP]["advice"]):
        done = run_step(step, run_hotfix, tmp_path)
        assert done.returncode == 0, (step, done.stderr[-2000:])
    found, code = statuses(run_hotfix, *options)
    assert code == 0 and [(e["id"], e["state"]) for e in found.values() if e["recorded"]] == \
        [(MAMBA_ID, "applied"), (ON_TOP, "applied")], found


def test_nothing_recorded_and_the_file_deleted(vllm_install, catalog, run_hotfix, _isolated_state):
    """The series' file deleted with nothing recorded: the hotfix on top is `drifted` too (not `not-applied`,
    `hotfix apply mamba-align-block-size` first, which exits 4); every reader exits as it says (doctor's next
    step is the restore status prints first, not an apply), nothing written."""
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    (venv.site_packages / MAMBA).unlink()
    before = snapshot(venv.site_packages / "vllm", _isolated_state)
    found, code = statuses(run_hotfix, MAMBA_ID, ON_TOP, *options)
    assert (found[MAMBA_ID]["state"], found[ON_TOP]["state"], code) == ("drifted", "drifted", 1), found
    assert steps(found[ON_TOP]["advice"])[1:] == [f"hotfix apply {i} {shlex.join(options)}" for i in (MAMBA_ID, ON_TOP)]
    for hotfix_id in (MAMBA_ID, ON_TOP):
        for more in (("--dry-run",), ()):
            assert run_hotfix("apply", hotfix_id, *options, *more).returncode == 4
        assert run_hotfix("contains", hotfix_id, *options).returncode == 4
    done = run_hotfix("verify", ON_TOP, *options)
    assert done.returncode == 1 and "drifted" in done.stdout, done.stdout
    done = run_hotfix("doctor", *MAMBA_LOGS, *options, "--json")  # its next step: the status's first, the restore
    (named,) = [v for v in json.loads(done.stdout)["verdicts"] if v["id"] == MAMBA_ID]
    assert (done.returncode, named["state"], named["next"]) == (1, "drifted", steps(found[MAMBA_ID]["advice"])[0]), named
    assert snapshot(venv.site_packages / "vllm", _isolated_state) == before


def test_a_patch_that_does_not_fit_the_release_s_own_file_is_unknown(vllm_install, catalog, run_hotfix, tmp_path):
    """Generally where a patch would not apply: on a pristine file (RECORD's bytes) no restore helps, so
    status says `unknown` (as for a release the catalog has no patch for: never `not-applied`, never ruled
    out), and apply exits 4 with nothing written. Here: divisor-on-top's diff without its `after`."""
    venv = vllm_install("0.30.0")
    mamba_applied = (catalog.parent / "mamba-applied" / MAMBA).read_bytes()
    diff = edit_diff({MAMBA: mamba_applied}, {MAMBA: (ON_TOP_OLD, ON_TOP_NEW)}, tmp_path / "diff")
    other = write_patch_catalog(tmp_path / "catalog", "no-after", diff, distribution="vllm", versions="==0.30.0", fixed_in=None,
                                title="no-after: divisor-on-top without its after", file="0.30.patch")
    options = ("--python", str(venv.python), "--catalog", str(other))
    pristine = (venv.site_packages / MAMBA).read_bytes()
    found, code = statuses(run_hotfix, "no-after", *options)
    assert (found["no-after"]["state"], code) == ("unknown", 1), found
    assert "does not fit" in found["no-after"]["advice"] and "pip" not in found["no-after"]["advice"], found
    assert run_hotfix("apply", "no-after", *options).returncode == 4
    assert (venv.site_packages / MAMBA).read_bytes() == pristine


def test_the_catalog_s_series_on_a_real_vllm_ascend_checkout(run_hotfix, tmp_path, _isolated_state):
    """glm-conv-null-slot recorded on a git checkout of the real 0.30.0rc2 sdist, causal_conv1d.py deleted:
    zero-row (its `after`) is `drifted`, not `not-applied`; apply exits 4, rollback 3 (it cannot), nothing
    written; the advice -- `git checkout` of every file of the recorded hotfix it touches, then both applies
    -- runs as pasted and leaves the series applied."""
    checkout = realdata.ascend_checkout("0.30.0rc2", tmp_path / "vllm-ascend")
    options = ("--root", str(checkout))
    assert run_hotfix("apply", NULL_SLOT, *options).returncode == 0
    (checkout / CAUSAL).unlink()
    before = snapshot(checkout / "vllm_ascend", _isolated_state)
    found, code = statuses(run_hotfix, NULL_SLOT, ZERO_ROW, *options)
    assert (found[NULL_SLOT]["state"], found[ZERO_ROW]["state"], code) == ("drifted", "drifted", 1), found
    printed = steps(found[ZERO_ROW]["advice"])
    assert printed[0].startswith(f"git -C {checkout} checkout -- ") and CAUSAL in printed[0], printed
    assert printed[1:] == [f"hotfix apply {i} {shlex.join(options)}" for i in (NULL_SLOT, ZERO_ROW)], printed
    for args, code in (((ZERO_ROW, "--dry-run"), 4), ((ZERO_ROW,), 4), ((NULL_SLOT,), 3)):
        assert run_hotfix("apply", *args, *options).returncode == code, args
    assert run_hotfix("rollback", NULL_SLOT, *options).returncode == 3
    assert snapshot(checkout / "vllm_ascend", _isolated_state) == before
    for step in printed:
        done = run_step(step, run_hotfix, tmp_path)
        assert done.returncode == 0, (step, done.stderr)
    found, code = statuses(run_hotfix, NULL_SLOT, ZERO_ROW, *options)
    assert (found[NULL_SLOT]["state"], found[ZERO_ROW]["state"], code) == ("applied", "applied", 0), found

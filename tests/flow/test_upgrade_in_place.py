"""A package upgraded under the record (`pip install vllm==X` into the same venv): the record is `stale`
(or `fixed-upstream` where the new release has the fix), with one advice -- `apply` re-plans it where the
catalog covers the new release, else `rollback` forgets the record -- and a rollback never writes the
other release's backups into the new one: it forgets the record, the new release stays pristine, and
apply -> verify -> rollback then work on it. Real wheels, real `pip install` over the patched release."""

from __future__ import annotations

import json

import pytest

import realdata
from fixtures.series import write_catalog
from fixtures.twofiles import make_two_file_patch

pytestmark = [pytest.mark.real, pytest.mark.slow]

MAMBA = "mamba-align-block-size"


def status(run_hotfix, hotfix_id, *options) -> tuple[dict, int]:
    done = run_hotfix("status", hotfix_id, *options, "--json")
    (entry,) = json.loads(done.stdout)
    return entry, done.returncode


def audit(run_hotfix, python) -> tuple[dict, int]:
    done = run_hotfix("audit", "vllm", "--python", python, "--json")
    return json.loads(done.stdout), done.returncode


def forget_then_work_on_the_new_release(run_hotfix, hotfix_id, options, python, *, reapply: bool) -> None:
    """rollback forgets (writes nothing), the new release is pristine, nothing is left that is not in effect."""
    done = run_hotfix("rollback", hotfix_id, *options)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"forgot the record of {hotfix_id}@") and "no file was written" in done.stdout
    report, code = audit(run_hotfix, python)
    assert (report["pristine"], report["recorded"], code) == (True, [], 0), report
    assert run_hotfix("status", "--all").returncode == 0
    if reapply:  # the release installed now, as any other
        assert run_hotfix("apply", hotfix_id, *options).returncode == 0
        assert run_hotfix("verify", hotfix_id, *options).returncode == 0
        assert run_hotfix("rollback", hotfix_id, *options).returncode == 0
        assert audit(run_hotfix, python)[1] == 0


def test_another_file_under_the_record_is_stale_and_apply_replans_it(vllm_install, run_hotfix):
    """0.30.0 -> 0.31.0 with the built-in mamba fix (its range covers 0.31.0): before, `rollback` was
    refused for ever ("changed by hand? reinstall") though the new release was pristine."""
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python))
    assert run_hotfix("apply", MAMBA, *options).returncode == 0
    realdata.pip_install(venv, str(realdata.vllm_wheel("0.31.0")))
    entry, code = status(run_hotfix, MAMBA, *options)
    assert (entry["state"], code) == ("stale", 1), entry
    assert "changed from 0.30.0 to 0.31.0 under the record" in entry["detail"], entry
    assert entry["advice"] == f"`hotfix apply {MAMBA} --python {venv.python}` re-plans it for vllm 0.31.0", entry
    report, code = audit(run_hotfix, venv.python)  # pristine 0.31.0, but the record says a fix belongs there
    assert (report["pristine"], [r["state"] for r in report["recorded"]], code) == (True, ["stale"], 1), report
    assert run_hotfix("status", "--all").returncode == 1
    forget_then_work_on_the_new_release(run_hotfix, MAMBA, options, venv.python, reapply=True)


def test_the_equal_file_case_writes_no_old_bytes_back(vllm_install, run_hotfix, tmp_path):
    """`hotfix new --from-release vllm==0.25.1` applied on 0.25.0, then 0.25.1 installed over it: the files
    are what the hotfix wrote, the release has the fix (fixed-upstream, in effect). Before, `rollback`
    restored the 0.25.0 originals into 0.25.1 (audit: not pristine)."""
    catalog = tmp_path / "catalog"
    assert run_hotfix("new", "vllm-0-25-1", "--from-release", "vllm==0.25.1", "--out", catalog).returncode == 0
    venv = vllm_install("0.25.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    assert run_hotfix("apply", "vllm-0-25-1", *options).returncode == 0
    realdata.pip_install(venv, str(realdata.vllm_wheel("0.25.1")))
    for catalogs in (options, options[:2]):  # the same verdict with the catalog and without it
        entry, code = status(run_hotfix, "vllm-0-25-1", *catalogs)
        assert (entry["state"], code) == ("fixed-upstream", 0), entry
        assert "changed from 0.25.0 to 0.25.1 under the record, which has the fix" in entry["detail"], entry
    forget_then_work_on_the_new_release(run_hotfix, "vllm-0-25-1", options, venv.python, reapply=False)


def test_a_release_the_catalog_does_not_cover_is_forgotten(vllm_install, vllm_template, run_hotfix, tmp_path):
    """A hotfix for ==0.30.0 under a 0.31.0: stale, and the one advice is the rollback that forgets it."""
    patch = make_two_file_patch(vllm_template("0.30.0").site_packages, tmp_path / "diff").read_bytes()
    catalog = write_catalog(tmp_path / "catalog", {"two-files": (patch, "")})
    venv = vllm_install("0.30.0")
    options = ("--python", str(venv.python), "--catalog", str(catalog))
    assert run_hotfix("apply", "two-files", *options).returncode == 0
    realdata.pip_install(venv, str(realdata.vllm_wheel("0.31.0")))
    entry, code = status(run_hotfix, "two-files", *options)
    assert (entry["state"], code) == ("stale", 1), entry
    assert entry["advice"] == (f"`hotfix rollback two-files --python {venv.python} --catalog {catalog}` forgets the "
                               "record (it writes no file)"), entry
    forget_then_work_on_the_new_release(run_hotfix, "two-files", options, venv.python, reapply=False)


def test_upgrade_under_the_record_then_reapply_then_fixed_upstream(vllm_install, run_hotfix):
    venv = vllm_install("0.25.0")
    assert run_hotfix("apply", MAMBA, "--python", venv.python).returncode == 0

    realdata.pip_install(venv, str(realdata.vllm_wheel("0.26.0")))  # a real in-place upgrade
    report, code = audit(run_hotfix, venv.python)
    assert report["pristine"] and code == 1  # pristine 0.26.0; the record is stale
    entry, code = status(run_hotfix, MAMBA, "--python", venv.python)
    assert (entry["state"], code) == ("stale", 1), entry
    assert "changed from 0.25.0 to 0.26.0 under the record" in entry["detail"], entry
    assert f"hotfix apply {MAMBA} --python" in entry["advice"] and "0.26.0" in entry["advice"], entry
    assert run_hotfix("verify", "--python", venv.python).returncode == 1

    again = run_hotfix("apply", MAMBA, "--python", venv.python)
    assert again.returncode == 0, again.stderr
    entry, code = status(run_hotfix, MAMBA, "--python", venv.python)
    assert (entry["state"], code) == ("applied", 0), entry

    realdata.pip_install(venv, str(realdata.vllm_wheel("0.32.0")))
    entry, code = status(run_hotfix, MAMBA, "--python", venv.python)
    assert (entry["state"], code) == ("fixed-upstream", 0), entry
    assert "changed from 0.26.0 to 0.32.0 under the record" in entry["detail"], entry
    assert run_hotfix("apply", MAMBA, "--python", venv.python).returncode == 5

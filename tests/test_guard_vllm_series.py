"""Three hotfixes as one series carried to a container: `hotfix export` (from a pristine real vLLM 0.30.0)
-> `hotfix compose` (one mount per file: the top of its series) -> the exported files in place of the
image's (a symlink farm of the cached full vLLM venv, as bind mounts would put them) -> `hotfix verify
--lock` and the guard in strict mode under vLLM's real ``load_general_plugins()``: all agree, on every
hotfix and on the fingerprint; with one file reverted, all agree on which hotfix is lost.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import realdata
from fixtures import crash
from fixtures.composefiles import LIST_ENV as COMPOSE, validate
from fixtures.series import MAMBA, MAMBA_ID, STATES, make_series_catalog
from fixtures.vllmfull import guard_setup, loader, run

pytestmark = [pytest.mark.tools, pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

REPO = Path(__file__).resolve().parents[1]
SERIES = (MAMBA_ID, "pr77-postprocess", "states-note")


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    work = tmp_path_factory.mktemp("series-full")
    full = guard_setup(work / "guard")
    template = realdata.vllm_template("0.30.0")
    catalog = make_series_catalog(template.site_packages, work / "made", REPO)
    pristine = realdata.copy_venv(template, work / "pristine")
    export_dir = work / "project" / "hotfix-export"
    done = subprocess.run(crash.hotfix_argv("export", *SERIES, "--to", export_dir, "--python", pristine.python,
                                            "--catalog", catalog), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    farm = work / "farm"  # the image's vLLM with the exported files where the mounts put them
    farm.mkdir()
    subprocess.run(["cp", "-as", str(full["venv"].site_packages / "vllm"), str(farm / "vllm")], check=True)
    shutil.copytree(full["venv"].site_packages / "vllm-0.30.0.dist-info", farm / "vllm-0.30.0.dist-info")
    lock = json.loads((export_dir / "hotfix.lock").read_text())
    for rel in {f["path"]: f["export"] for h in lock["hotfixes"] for f in h["files"]}.items():
        (farm / rel[0]).unlink()
        shutil.copyfile(export_dir / rel[1], farm / rel[0])
    return {**full, "catalog": catalog, "export": export_dir, "farm": farm, "lock_doc": lock}


def verify_lock(carried) -> tuple[subprocess.CompletedProcess, list]:
    done = run(carried, crash.hotfix_argv("verify", "--lock", carried["export"] / "hotfix.lock", "--json")
               [:1] and [str(carried["venv"].python), "-m", "vllm_hotfix", "verify", "--lock",
                         str(carried["export"] / "hotfix.lock"), "--json"],
               pythonpath=[carried["hotfix"], carried["farm"]])
    return done, json.loads(done.stdout or "[]")


def test_the_lock_lists_the_series_and_compose_mounts_each_file_once(carried, tmp_path):
    lock = carried["lock_doc"]
    assert [h["id"] for h in lock["hotfixes"]] == list(SERIES)
    mamba, pr77, _ = lock["hotfixes"]
    assert mamba["files"][0]["sha256"] == pr77["files"][0]["baseline_sha256"]  # the chain: pr77 on mamba's bytes
    assert mamba["files"][0]["export"] == pr77["files"][0]["export"] == f"pr77-postprocess/{MAMBA}"  # the top
    compose_file = tmp_path / "docker-compose.yml"
    compose_file.write_text(COMPOSE)
    done = subprocess.run(crash.hotfix_argv("compose", *SERIES, "--service", "vllm", "--file", compose_file,
                                            "--export-dir", carried["export"],
                                            "--container-site-packages", "/usr/local/lib/python3.12/site-packages"),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = compose_file.read_text()
    assert text.count(f":/usr/local/lib/python3.12/site-packages/{MAMBA}:ro") == 1
    assert text.count(f":/usr/local/lib/python3.12/site-packages/{STATES}:ro") == 1
    validate(compose_file)


def test_verify_lock_and_the_strict_guard_agree_on_every_hotfix_and_the_fingerprint(carried):
    done, checks = verify_lock(carried)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(c["id"], c["state"]) for c in checks] == [(i, "applied") for i in SERIES]
    fingerprint = checks[0]["fingerprint"]
    proc, _ = loader(carried, pythonpath=[carried["hotfix"], carried["farm"]],
                     HOTFIX_LOCK=str(carried["export"] / "hotfix.lock"), HOTFIX_STRICT="1", CHILDREN="spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    guard = [line for line in proc.stdout.splitlines() if "vllm-hotfix guard pid=" in line and " role=" in line
             and "module " not in line]
    print("\n".join(guard))
    lines = [line for line in guard if ": code after " not in line]
    assert len(lines) == 2 and all(f"fingerprint={fingerprint}:" in line for line in lines), lines
    code = [line for line in guard if ": code after " in line]  # the lock names code: each process checks it
    assert len(code) == 2, guard
    for hotfix_id in SERIES:
        assert all(f"{hotfix_id} [lock] in effect" in line for line in lines), lines


def test_one_file_reverted_is_the_same_lost_hotfix_everywhere(carried, tmp_path):
    states = carried["farm"] / STATES
    mounted = states.read_bytes()
    states.unlink()
    shutil.copyfile(carried["venv"].site_packages / STATES, states)  # the mount is missing: the image's own file
    try:
        done, checks = verify_lock(carried)
        assert done.returncode == 1
        assert [(c["id"], c["state"]) for c in checks] == [(MAMBA_ID, "applied"), ("pr77-postprocess", "applied"),
                                                           ("states-note", "lost")]
        proc, _ = loader(carried, pythonpath=[carried["hotfix"], carried["farm"]],
                         HOTFIX_LOCK=str(carried["export"] / "hotfix.lock"), HOTFIX_STRICT="1")
        assert proc.returncode == 1
        out = proc.stdout + proc.stderr
        assert re.search(r"states-note \[lock\] NOT IN EFFECT: lost", out) or "states-note: " in out, out
        assert f"{MAMBA_ID} [lock] in effect" in out and "pr77-postprocess [lock] in effect" in out
    finally:
        states.unlink()
        states.write_bytes(mounted)

"""glm-conv-null-slot on the REAL vllm-ascend releases from the index, as users have them: a git checkout of
the 0.30.0rc2 sdist (the image's /vllm-workspace/vllm-ascend, also `pip install -e`'d), and an installed
layout of that release; the distribution name works wherever a package is asked for, on real wheels that
cannot be imported here (no torch_npu)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

import realdata
from fixtures.ascend import CAUSAL_CONV1D, CAUSAL_CONV1D_BEFORE, CONV_STATE, CONV_STATE_BEFORE

pytestmark = [pytest.mark.real, pytest.mark.slow]

RELEASE = "0.30.0rc2"
NULL_SLOT, ZERO_ROW = "glm-conv-null-slot", "glm-conv-null-slot-zero-row"
REPO = Path(__file__).resolve().parent.parent


def _digests(root: Path) -> dict[str, str]:
    return {p: hashlib.sha256((root / p).read_bytes()).hexdigest() for p in (CONV_STATE, CAUSAL_CONV1D)}


def _ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return realdata.ascend_checkout(RELEASE, tmp_path_factory.mktemp("ascend") / "vllm-ascend")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> realdata.Venv:
    return realdata.copy_venv(realdata.ascend_template(RELEASE), tmp_path_factory.mktemp("ascend-inst") / "venv")


def test_the_offline_fixture_holds_the_real_release_files():
    source = realdata.ascend_source(RELEASE)
    assert (source / CONV_STATE).read_text() == CONV_STATE_BEFORE
    assert (source / CAUSAL_CONV1D).read_text() == CAUSAL_CONV1D_BEFORE
    assert "tl.where(active, request, -1)" in CONV_STATE_BEFORE and "null_block_id = PAD_SLOT_ID" in CAUSAL_CONV1D_BEFORE


def _series_round_trip(run_hotfix, *where: str, files: Path) -> None:
    pristine = _digests(files)
    dry = _ok(run_hotfix("apply", NULL_SLOT, *where, "--dry-run"))
    assert "nothing was written" in dry.stdout and _digests(files) == pristine
    _ok(run_hotfix("apply", NULL_SLOT, *where))
    _ok(run_hotfix("verify", NULL_SLOT, *where))
    first = _digests(files)
    assert "tl.where(active, request, REQUESTS)" in (files / CONV_STATE).read_text()
    _ok(run_hotfix("apply", ZERO_ROW, *where))
    status = json.loads(_ok(run_hotfix("status", *where, "--json")).stdout)
    states = {h["id"]: (h["state"], h.get("series")) for h in status if h["id"] in (NULL_SLOT, ZERO_ROW)}
    assert states == {NULL_SLOT: ("applied", 1), ZERO_ROW: ("applied", 2)}
    # The bottom one cannot come out under the zero row (written on its lines): refused, nothing changed.
    assert run_hotfix("rollback", NULL_SLOT, *where).returncode == 3
    _ok(run_hotfix("rollback", ZERO_ROW, *where))  # the series member alone
    assert _digests(files) == first
    _ok(run_hotfix("verify", NULL_SLOT, *where))
    _ok(run_hotfix("rollback", NULL_SLOT, *where))
    assert _digests(files) == pristine


def test_series_on_the_real_checkout(run_hotfix, checkout):
    _series_round_trip(run_hotfix, "--root", checkout, files=checkout)
    assert subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True,
                          check=True).stdout == ""


def test_series_on_the_installed_release(run_hotfix, installed):
    _series_round_trip(run_hotfix, "--python", installed.python, files=installed.site_packages)
    audit = json.loads(_ok(run_hotfix("audit", "vllm-ascend", "--python", installed.python, "--json")).stdout)
    assert audit["pristine"] is True


def test_editable_install_of_the_checkout_is_the_target(run_hotfix, tmp_path):
    """/vllm-workspace/vllm-ascend: the sdist laid out at its tag and installed with the real `pip install -e`."""
    co, venv = realdata.ascend_editable(RELEASE, tmp_path)
    where = json.loads(_ok(run_hotfix("where", "vllm-ascend", "--python", venv.python, "--json")).stdout)
    assert where["kind"] == "editable" and Path(where["root"]) == co and where["version"] == RELEASE
    _series_round_trip(run_hotfix, "--python", venv.python, files=co)


def test_the_range_is_what_the_published_releases_hold(tmp_path):
    """0.30.0rc1 ships both files as 0.30.0rc2 does; 0.29.0rc1 has another gather, and no UPDATE null id."""
    patch = REPO / "patches" / NULL_SLOT / "0001-null-slot-for-padded-conv-state-rows.patch"
    rc1 = realdata.ascend_source("0.30.0rc1")
    assert _digests(rc1) == _digests(realdata.ascend_source(RELEASE))
    old = realdata.ascend_source("0.29.0rc1")
    assert not (old / CONV_STATE).exists() and "null_block_id" not in (old / CAUSAL_CONV1D).read_text()
    assert subprocess.run(["git", "apply", "--check", str(patch)], cwd=old, capture_output=True).returncode != 0
    from vllm_hotfix.catalog.manifest import load_manifest

    spec = load_manifest(REPO / "manifests" / f"{NULL_SLOT}.toml").targets[0]
    assert spec.contains("0.30.0rc1") and spec.contains(RELEASE) and not spec.contains("0.29.0rc1")


@pytest.mark.parametrize("version", ["0.26.0rc1", "0.23.0"])
def test_distribution_name_and_import_name_give_one_answer(run_hotfix, version):
    """Published x86_64 wheels, installed --no-deps: importing vllm_ascend fails here (no torch_npu), and
    nothing needs to."""
    venv = realdata.ascend_template(version)  # read only: audit and where write nothing
    assert subprocess.run([venv.python, "-c", "import vllm_ascend"], capture_output=True).returncode != 0
    answers = [json.loads(_ok(run_hotfix("audit", name, "--python", venv.python, "--json")).stdout)
               for name in ("vllm-ascend", "vllm_ascend", "Vllm-Ascend")]
    assert answers[0] == answers[1] == answers[2] and answers[0]["pristine"] is True
    where = [_ok(run_hotfix("where", name, "--python", venv.python)).stdout for name in ("vllm-ascend", "vllm_ascend")]
    assert where[0] == where[1] and version in where[0]

"""`hotfix check-catalog` on the real, cached vLLM wheels (never downloads beyond realdata.vllm_wheel)."""

from __future__ import annotations

import hashlib
import json

import pytest

from fixtures.manifests import write_patch_catalog

pytestmark = pytest.mark.real

MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


@pytest.fixture(autouse=True)
def cached_wheels(vllm_wheel):
    for version in ("0.30.0", "0.31.0", "0.32.0"):
        vllm_wheel(version)


def test_mamba_applies_in_range_and_is_fixed_upstream_on_the_fixing_release(run_hotfix):
    done = run_hotfix("check-catalog", "mamba-align-block-size", "--versions", "0.30.0,0.31.0,0.32.0", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert [(c["release"], c["state"]) for c in report["cells"]] == [
        ("0.30.0", "applies"), ("0.31.0", "applies"), ("0.32.0", "fixed-upstream")]
    assert "[3/3] mamba-align-block-size on vllm 0.32.0" in done.stderr  # progress on stderr


def _broken_catalog(root):
    """A manifest whose patch expects a line no vLLM release has, plus a git-target manifest."""
    patch = (f"diff --git a/{MAMBA} b/{MAMBA}\n--- a/{MAMBA}\n+++ b/{MAMBA}\n"
             "@@ -1,2 +1,2 @@\n-# this line is in no vLLM release\n+# replaced\n # SPDX\n").encode()
    write_patch_catalog(root, "broken", patch, distribution="vllm", versions=">=0.31.0,<0.33.0", fixed_in=None,
                        title="a hotfix that no longer applies", file="0.patch")
    (root / "manifests" / "on-a-checkout.toml").write_text("""\
schema = 1
id = "on-a-checkout"
version = 1
title = "git target"
[[targets]]
distribution = "vllm-ascend"
git = { tag = "v0.30.0rc2" }
[[patches]]
file = "broken/0.patch"
sha256 = "%s"
""" % hashlib.sha256(patch).hexdigest())
    return root


def test_failing_release_exits_1_with_the_first_hunk_error_and_matrix(run_hotfix, tmp_path):
    catalog = _broken_catalog(tmp_path / "catalog")
    done = run_hotfix("check-catalog", "broken", "on-a-checkout", "mamba-align-block-size",
                      "--versions", "0.30.0,0.31.0", "--catalog", catalog)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["HOTFIX", "TARGET", "0.30.0", "0.31.0"]
    assert lines[1].split() == ["broken@1", "vllm", "not-applicable", "fails"]
    assert lines[2].split() == ["mamba-align-block-size@1", "vllm", "applies", "applies"]
    assert "on-a-checkout@1 (vllm-ascend): skipped: git target" in done.stdout
    failure = [line for line in lines if line.startswith("broken@1 on vllm 0.31.0: fails: ")]
    assert failure and MAMBA in failure[0] and "@@ -1,2 +1,2 @@" in failure[0]


def test_bad_versions_option_is_a_usage_error(run_hotfix):
    done = run_hotfix("check-catalog", "--versions", "0.30.x")
    assert done.returncode == 2 and "0.30.x" in done.stderr


def test_signatures_that_can_never_name_the_fix_are_refused(run_hotfix, tmp_path):
    """The form `hotfix new` wrote before the tiers (weights, no tier): doctor could at most ever say
    "possible"; check-catalog fails it (exit 1) naming why, before any release is looked at."""
    catalog = tmp_path / "catalog"
    (catalog / "manifests").mkdir(parents=True)
    body = """\
schema = 1
id = "weights-only"
version = 1
title = "signatures in the old form"
[[targets]]
distribution = "vllm-ascend"
git = { tag = "v0.30.0rc2" }
[[patches]]
file = "x/0.patch"
sha256 = "%s"
[[signatures]]
pattern = 'CUDA error: an illegal memory access was encountered'
role = "first-error"
weight = 0.5
explain = "the crash"
""" % ("0" * 64)
    (catalog / "manifests" / "weights-only.toml").write_text(body)
    done = run_hotfix("check-catalog", "weights-only", "--catalog", catalog)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'weights-only@1 (vllm-ascend): fails: signatures: doctor can never name it: no [[signatures]] entry has tier = "specific"' \
        in done.stdout
    (catalog / "manifests" / "weights-only.toml").write_text(body.replace('weight = 0.5', 'tier = "specific"').replace(
        'role = "first-error"', 'role = "error-line"'))
    done = run_hotfix("check-catalog", "weights-only", "--catalog", catalog, "--json")
    assert done.returncode == 0 and [c["state"] for c in json.loads(done.stdout)["cells"]] == ["skipped"]


def test_a_catalog_given_alone_is_checked_without_the_built_in_one(run_hotfix, tmp_path):
    """Issue 45: `check-catalog --catalog DIR` with no id downloaded eight vLLM wheels (2.6 GB) for the
    built-in catalog; it checks DIR's hotfixes (here one on a git target: skipped, nothing downloaded)."""
    catalog = tmp_path / "catalog"
    (catalog / "manifests").mkdir(parents=True)
    (catalog / "manifests" / "on-a-checkout.toml").write_text(
        (_broken_catalog(tmp_path / "broken") / "manifests" / "on-a-checkout.toml").read_text())
    done = run_hotfix("check-catalog", "--catalog", catalog, env={"PIP_INDEX_URL": "http://127.0.0.1:9/simple"})
    assert "on-a-checkout@1 (vllm-ascend): skipped: git target" in done.stdout, done.stdout + done.stderr
    assert "mamba-align-block-size" not in done.stdout and "Traceback" not in done.stderr

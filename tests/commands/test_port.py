"""`hotfix port` on the real wheels: a catalog holding only mamba-align-block-size's 0.25.patch is ported
over 0.25.1-0.33.0; every buggy release gets a variant whose post-image is the hand-made variant's, byte
for byte; a conflicting release is exit 4 with the hunk and both sides and nothing is written."""

from __future__ import annotations

import json
import os

import pytest

import realdata
from fixtures.manifests import write_patch_catalog
from fixtures.releases import (
    HAND_MADE, MAMBA, REPO, git_apply_check, one_variant_catalog, upstream_fix_diff, wheel_file,
)

RELEASES = ["0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"]
pytestmark = pytest.mark.real


@pytest.fixture(autouse=True)
def _a_team_version_of_a_builtin_id(_isolated_state, monkeypatch):
    """The test catalog is a team's version 100 of the built-in mamba-align-block-size: said, as users say it."""
    monkeypatch.setenv("HOTFIX_ALLOW_SHADOW", "1")


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    """One port of the one-variant catalog over every release (shared by the tests of this module)."""
    import subprocess
    import sys

    for version in RELEASES:
        realdata.vllm_wheel(version)
    tmp = tmp_path_factory.mktemp("port")
    catalog = one_variant_catalog(tmp / "catalog")
    out = tmp / "out"
    done = subprocess.run([sys.executable, "-m", "vllm_hotfix", "port", "mamba-align-block-size@100",
                           "--catalog", str(catalog), "--versions", ",".join(RELEASES), "--out", str(out), "--json"],
                          capture_output=True, text=True, env={**os.environ, "HOTFIX_STATE_DIR": str(tmp / "state"),
                                                               "HOTFIX_ALLOW_SHADOW": "1"})
    return done, out


def _post_image(manifest, release: str) -> bytes:
    from vllm_hotfix.catalog.upstream import WheelReader
    from vllm_hotfix_guard.core.hunk_apply import plan_patch
    from vllm_hotfix.flow.hotfix import catalog_hotfix
    from vllm_hotfix.flow.applicability import release_target

    target = release_target(manifest.target_for("vllm"), release)
    with WheelReader(realdata.vllm_wheel(release)) as read:
        (edit,) = plan_patch(catalog_hotfix(manifest, target).series, read).edits
    return edit.after


def test_every_buggy_release_gets_a_variant_with_the_hand_made_post_image(ported, tmp_path):
    from vllm_hotfix.catalog.manifest import load_manifest

    done, out = ported
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    states = {r["release"]: r["state"] for r in report["releases"]}
    assert states == {"0.25.1": "applies", **{r: "ported" for r in RELEASES[1:8]},
                      "0.32.0": "fixed-upstream", "0.33.0": "fixed-upstream"}
    assert [(v["file"], v["versions"], v["releases"]) for v in report["variants"]] == [
        ("mamba-align-block-size/0.26.0.patch", ">=0.26.0,<0.27.0", ["0.26.0"]),
        ("mamba-align-block-size/0.27.0.patch", ">=0.27.0,<0.32.0", ["0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0"]),
    ]
    ported_manifest = load_manifest(out / "manifests" / "mamba-align-block-size.toml")  # the strict loader
    hand_made = load_manifest(REPO / "manifests" / "mamba-align-block-size.toml")
    for release, hand in HAND_MADE.items():
        assert _post_image(ported_manifest, release) == _post_image(hand_made, release), release
        (spec,) = ported_manifest.patches_for(release)
        assert git_apply_check(tmp_path / release, {MAMBA: wheel_file(release)},
                               ported_manifest.patch_path(spec).read_bytes()), release
    spec = ported_manifest.patches[-1]
    assert (spec.stats.files, spec.stats.insertions, spec.stats.deletions) == (1, 13, 1)
    assert len(spec.md5) == 32 and len(spec.sha256) == 64
    # the comments, signatures and checks of the manifest are kept byte for byte above the new tables
    assert "# Published wheels checked" in (out / "manifests" / "mamba-align-block-size.toml").read_text()


def test_the_ported_catalog_passes_check_catalog(ported, run_hotfix):
    _, out = ported
    done = run_hotfix("check-catalog", "mamba-align-block-size@100", "--catalog", out, "--versions",
                      ",".join(RELEASES), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {c["state"] for c in json.loads(done.stdout)["cells"]} == {"applies", "fixed-upstream"}


def test_a_conflicting_release_is_exit_4_naming_the_hunk_and_nothing_is_written(run_hotfix, tmp_path):
    catalog = one_variant_catalog(tmp_path / "catalog", fixed_in=False, versions=">=0.25.0")  # 0.32.0 now in range
    done = run_hotfix("port", "mamba-align-block-size@100", "--catalog", catalog, "--versions", "0.25.1,0.31.0,0.32.0",
                      "--out", tmp_path / "out")
    assert done.returncode == 4, done.stdout + done.stderr
    assert not (tmp_path / "out").exists()
    assert f"vllm 0.32.0: {MAMBA}: hunk @@ -115,9 +115,21 @@ conflicts at line 124" in done.stdout
    assert "(new_req_data.num_computed_tokens - 1) // mamba_block_size" in done.stdout          # the release's side
    assert "(new_req_data.num_computed_tokens - 1) // self._mamba_block_size" in done.stdout    # the patch's side
    assert "nothing was written" in done.stdout
    as_json = run_hotfix("port", "mamba-align-block-size@100", "--catalog", catalog, "--versions", "0.31.0,0.32.0",
                         "--out", tmp_path / "out", "--json")
    assert as_json.returncode == 4
    (conflict,) = [r for r in json.loads(as_json.stdout)["releases"] if r["state"] == "conflicts"][0]["conflicts"]
    assert conflict["path"] == MAMBA and conflict["hunk"].startswith("@@ -") and conflict["line"] == 124
    assert not (tmp_path / "out").exists()


def test_fixed_upstream_by_content_proposes_fixed_in(run_hotfix, tmp_path):
    """The upstream fix itself as a hotfix with an open range and no fixed_in: 0.32.0 and 0.33.0 hold it."""
    catalog = write_patch_catalog(tmp_path / "catalog", "upstream-divisor", upstream_fix_diff(tmp_path / "fix.diff").read_bytes(),
                                  distribution="vllm", versions=">=0.31.0", fixed_in=None, title="the 0.32.0 divisor fix",
                                  file="fix.diff")
    done = run_hotfix("port", "upstream-divisor", "--catalog", catalog, "--versions", "0.31.0,0.32.0,0.33.0",
                      "--out", tmp_path / "out", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [(r["state"], r["by_content"]) for r in report["releases"]] == [
        ("applies", False), ("fixed-upstream", True), ("fixed-upstream", True)]
    assert report["proposed_fixed_in"] == "0.32.0" and report["written"] == []
    text = run_hotfix("port", "upstream-divisor", "--catalog", catalog, "--versions", "0.31.0,0.32.0",
                      "--out", tmp_path / "out")
    assert 'add fixed_in = "0.32.0"' in text.stdout and "nothing to port" in text.stdout


def test_dry_run_writes_nothing_and_says_what_it_would(run_hotfix, tmp_path):
    catalog = one_variant_catalog(tmp_path / "catalog")
    done = run_hotfix("port", "mamba-align-block-size@100", "--catalog", catalog, "--versions", "0.25.1,0.26.0",
                      "--out", tmp_path / "out", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "would write" in done.stdout and "0.26.0.patch (1 file +13/-1, versions >=0.26.0,<0.27.0)" in done.stdout
    assert not (tmp_path / "out").exists()


def test_a_release_the_index_lacks_is_unavailable_exit_10(run_hotfix, tmp_path):
    catalog = one_variant_catalog(tmp_path / "catalog")
    done = run_hotfix("port", "mamba-align-block-size@100", "--catalog", catalog, "--versions", "0.25.1,0.25.7",
                      "--out", tmp_path / "out", "--json")
    assert done.returncode == 10, done.stdout + done.stderr
    states = {r["release"]: r["state"] for r in json.loads(done.stdout)["releases"]}
    assert states == {"0.25.1": "applies", "0.25.7": "unavailable"}
    assert not (tmp_path / "out").exists()


def test_without_git_port_refuses_in_one_line(run_hotfix, tmp_path):
    catalog = one_variant_catalog(tmp_path / "catalog")
    done = run_hotfix("port", "mamba-align-block-size@100", "--catalog", catalog, "--out", tmp_path / "out",
                      env={"PATH": str(tmp_path / "empty")})
    assert done.returncode == 3
    assert done.stderr.splitlines()[0] == "hotfix: error: git is not installed here: `hotfix port` merges with `git merge-file`"
    assert not (tmp_path / "out").exists()

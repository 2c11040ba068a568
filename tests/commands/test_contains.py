"""`hotfix contains` on real vLLM installs and wheels: applicable, applied, contained, partly/conflicts, and
the matrix of a raw upstream diff over published releases, cross-checked with `git apply --check`."""

from __future__ import annotations

import json

import pytest

import realdata
from fixtures.releases import MAMBA, git_apply_check, upstream_fix_diff, wheel_file

HOTFIX = "mamba-align-block-size"


def contains(run_hotfix, *args):
    done = run_hotfix("contains", *args, "--json")
    return done.returncode, json.loads(done.stdout)


@pytest.mark.real
def test_the_hotfix_on_a_real_install_before_and_after_apply_and_edited_by_hand(vllm_install, run_hotfix):
    install = vllm_install("0.30.0")
    code, answer = contains(run_hotfix, HOTFIX, "--python", install.python)
    assert (code, answer["state"], answer["by"]) == (1, "applicable", "content")
    assert run_hotfix("apply", HOTFIX, "--python", install.python).returncode == 0
    code, answer = contains(run_hotfix, HOTFIX, "--python", install.python)
    assert (code, answer["state"], answer["by"]) == (0, "applied", "record")
    patched = install.site_packages / MAMBA
    patched.write_text(patched.read_text().replace("// self._mamba_block_size", "// self.cache_config.block_size"))
    code, answer = contains(run_hotfix, HOTFIX, "--python", install.python)
    assert code == 4 and answer["state"] in ("partly", "conflicts"), answer
    assert answer["files"][0]["path"] == MAMBA
    text = run_hotfix("contains", HOTFIX, "--python", install.python)
    assert text.stdout.startswith(f"{answer['state']}: {HOTFIX}@1 on vllm 0.30.0 at ")


@pytest.mark.real
def test_the_hotfix_on_the_release_that_fixed_it_is_contained(vllm_template, run_hotfix):
    code, answer = contains(run_hotfix, HOTFIX, "--python", vllm_template("0.32.0").python)  # only read
    assert (code, answer["state"], answer["by"]) == (0, "contained", "release")


@pytest.mark.real
def test_a_raw_diff_applied_with_apply_patch_reads_applied(vllm_install, run_hotfix, tmp_path):
    fix = upstream_fix_diff(tmp_path / "fix.diff")
    install = vllm_install("0.31.0")
    assert contains(run_hotfix, "--patch", fix, "--python", install.python)[1]["state"] == "applicable"
    assert run_hotfix("apply", "--patch", fix, "--python", install.python, "--package", "vllm").returncode == 0
    code, answer = contains(run_hotfix, "--patch", fix, "--python", install.python)
    assert (code, answer["state"]) == (0, "applied")
    tree = tmp_path / "tree"
    (tree / MAMBA).parent.mkdir(parents=True)
    (tree / MAMBA).write_bytes(wheel_file("0.32.0"))
    assert contains(run_hotfix, "--patch", fix, "--root", tree)[1]["state"] == "contained"


@pytest.mark.real
def test_matrix_of_the_upstream_fix_is_right_on_every_release(run_hotfix, tmp_path):
    fix = upstream_fix_diff(tmp_path / "fix.diff")
    for version in ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"):
        realdata.vllm_wheel(version)
    code, report = contains(run_hotfix, "--patch", fix, "--versions", ">=0.29")
    assert code == 0, report
    states = {r["release"]: r["state"] for r in report["releases"]}
    assert {"0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"} <= set(states)
    for release, state in states.items():  # the oracle: git apply on the wheel's own sources
        files = {MAMBA: wheel_file(release)}
        forward = git_apply_check(tmp_path / release / "f", files, fix.read_bytes())
        backward = git_apply_check(tmp_path / release / "r", files, fix.read_bytes(), reverse=True)
        expected = "applicable" if forward else "contained" if backward else state
        assert state == expected and (state in ("applicable", "contained")) == (forward or backward), release
    assert [states[r] for r in ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")] == \
        ["applicable"] * 3 + ["contained"] * 2
    text = run_hotfix("contains", "--patch", fix, "--versions", "0.31.0,0.32.0")
    assert text.stdout.splitlines()[:2] == ["RELEASE   0.31.0      0.32.0", "fix.diff  applicable  contained"]


def test_matrix_of_the_catalog_hotfix(run_hotfix):
    code, report = contains(run_hotfix, HOTFIX, "--versions", "0.24.0,0.30.0,0.32.0")
    assert code == 0
    assert [(r["release"], r["state"]) for r in report["releases"]] == [
        ("0.24.0", "not-applicable"), ("0.30.0", "applicable"), ("0.32.0", "contained")]


@pytest.mark.real
def test_a_release_the_index_lacks_is_unavailable(run_hotfix, tmp_path):
    fix = upstream_fix_diff(tmp_path / "fix.diff")
    code, report = contains(run_hotfix, "--patch", fix, "--versions", "0.31.0,0.31.9")
    assert code == 10
    assert [r["state"] for r in report["releases"]] == ["applicable", "unavailable"]


@pytest.mark.parametrize("args,code", [
    ((HOTFIX, "--patch", "README.md"), 2),
    (("--patch", "README.md", "--versions", ">=0.30", "--root", "."), 2),
    (("no-such-fix", "--root", "."), 3),
    (("--patch", "pyproject.toml", "--root", "."), 8),
])
def test_bad_input_is_one_line_with_a_documented_code(run_hotfix, args, code):
    done = run_hotfix("contains", *args)
    assert done.returncode == code, done.stderr
    assert done.stderr.startswith("hotfix: error: ") and "Traceback" not in done.stderr

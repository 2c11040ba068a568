"""`hotfix catalog watch` on real vLLM releases from the index (0.31.0 -> 0.32.0, 0.33.0, 0.34.0: real wheels,
cached): the built-in mamba-align-block-size is fixed upstream from 0.32.0 as check-catalog says; a patch on a
file upstream left alone still applies (extend the range); the upstream change itself is fixed upstream by
content (declare fixed_in); the mamba patch without its fixed_in conflicts and port's merge says why;
--write edits the manifests as a reviewable diff, and a second watch has nothing left to propose. The
range and line-edit rules are also checked without the index."""

from __future__ import annotations

import difflib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from fixtures.manifests import write_patch_catalog
from vllm_hotfix.catalog.manifest import load_manifest
from vllm_hotfix.catalog.model import TargetSpec
from vllm_hotfix.catalog.watch_text import edit_manifest
from vllm_hotfix.flow.watch import new_releases, open_range

REPO = Path(__file__).resolve().parents[2]
NEW = ["0.32.0", "0.33.0", "0.34.0"]


def test_new_releases_are_those_above_the_range():
    target = TargetSpec(distribution="vllm", package="vllm", versions=">=0.25.0,<0.32.0")
    published = ["0.24.0", "0.25.0", "0.31.0", "0.31.1", "0.32.0", "0.33.0", "0.34.0"]
    assert new_releases(target, published) == NEW
    assert new_releases(target, published, since="0.32.0") == ["0.33.0", "0.34.0"]
    rc = TargetSpec(distribution="vllm-ascend", package="vllm_ascend", versions=">=0.30.0rc1,<=0.30.0rc2")
    assert new_releases(rc, ["0.9.1", "0.23.0", "0.30.0rc2"]) == []  # older releases are never new
    assert new_releases(rc, ["0.9.1", "0.30.0rc2", "0.30.0"]) == ["0.30.0"]
    assert open_range(">=0.25.0,<0.32.0,!=0.26.0") == ">=0.25.0"
    assert open_range("<0.32.0") == ""


def test_the_line_edits_keep_every_other_byte_and_load_back(tmp_path):
    write_patch_catalog(tmp_path, "demo", b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n",
                        distribution="vllm", versions=">=0.31.0,<0.32.0", fixed_in=None, title="demo",
                        extra='versions = ">=0.31.0,<0.32.0"  # kept\n# a comment\n')
    path = tmp_path / "manifests" / "demo.toml"
    manifest = load_manifest(path, patches_dir=tmp_path / "patches")
    text = path.read_text()
    edited = edit_manifest(text, str(path), manifest, target_index=0, target_versions=">=0.31.0,<=0.34.0",
                           patch_versions={0: ">=0.31.0,<=0.34.0"}, fixed_in="0.35.0")
    changed = [line for line in difflib.ndiff(text.splitlines(), edited.splitlines()) if line[:1] in "+-"]
    assert changed == ['+ fixed_in = "0.35.0"', '- versions = ">=0.31.0,<0.32.0"', '+ versions = ">=0.31.0,<=0.34.0"',
                       '- versions = ">=0.31.0,<0.32.0"  # kept', '+ versions = ">=0.31.0,<=0.34.0"']
    assert "# a comment" in edited


def _wheel_file(release: str, member: str) -> str:
    import realdata

    return zipfile.ZipFile(realdata.vllm_wheel(release)).read(member).decode()


def _diff(path: str, old: str, new: str) -> bytes:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")).encode()


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """A catalog of three hotfixes for vllm >=0.31.0,<0.32.0 made from the real 0.31.0 / 0.32.0 wheels."""
    root = tmp_path_factory.mktemp("watched")
    counter = "vllm/compilation/counter.py"  # the same bytes in 0.31.0 ... 0.34.0
    old = _wheel_file("0.31.0", counter)
    lines = old.splitlines(True)
    new = "".join(lines[:len(lines) // 2] + ["# hotfix: watched\n"] + lines[len(lines) // 2:])
    write_patch_catalog(root, "watch-applies", _diff(counter, old, new), distribution="vllm",
                        versions=">=0.31.0,<0.32.0", fixed_in=None, title="still applies")
    logging = "vllm/config/logging.py"  # changed in 0.32.0, then left alone
    write_patch_catalog(root, "watch-fixed", _diff(logging, _wheel_file("0.31.0", logging), _wheel_file("0.32.0", logging)),
                        distribution="vllm", versions=">=0.31.0,<0.32.0", fixed_in=None, title="fixed upstream")
    shutil.copytree(REPO / "patches" / "mamba-align-block-size", root / "patches" / "mamba-copy")
    text = (REPO / "manifests" / "mamba-align-block-size.toml").read_text()
    text = text.replace('id = "mamba-align-block-size"', 'id = "mamba-copy"').replace('fixed_in = "0.32.0"\n', "")
    (root / "manifests" / "mamba-copy.toml").write_text(text.replace('file = "mamba-align-block-size/', 'file = "mamba-copy/'))
    return root


@pytest.mark.real
def test_watch_on_the_builtin_catalog_matches_check_catalog(run_hotfix):
    watched = run_hotfix("catalog", "watch", "mamba-align-block-size", "--json")
    assert watched.returncode == 0, watched.stderr
    rows = json.loads(watched.stdout)["rows"]
    mine = {r["release"]: r["state"] for r in rows if r["release"] in NEW}
    assert mine == dict.fromkeys(NEW, "fixed-upstream") and all(r["declared"] for r in rows)
    assert min((r["release"] for r in rows), key=lambda v: tuple(map(int, v.split(".")))) == "0.32.0"
    checked = run_hotfix("check-catalog", "mamba-align-block-size", "--versions", ",".join(NEW), "--json")
    assert {c["release"]: c["state"] for c in json.loads(checked.stdout)["cells"]} == mine
    whole = run_hotfix("catalog", "watch", "--json")
    rows = json.loads(whole.stdout)["rows"]
    # exit 4 when a hotfix conflicts on a newer release: several real vllm-ascend backports do (docs/catalog.md)
    assert whole.returncode == (4 if any(r["state"] == "conflicts" for r in rows) else 0), whole.stderr[-2000:]
    states = {(r["hotfix"].split("@")[0], r["release"]): r["state"] for r in rows}
    assert states[("mamba-align-block-size", "0.32.0")] == "fixed-upstream"
    for hotfix, release in states:  # the real vllm-ascend backports: no wheel published after their range
        if hotfix.startswith("glm-conv-null-slot"):
            assert (release, states[(hotfix, release)]) == (None, "current")


@pytest.mark.real
@pytest.mark.slow
def test_watch_proposes_writes_and_then_has_nothing_left(run_hotfix, watched, tmp_path):
    catalog = tmp_path / "catalog"
    shutil.copytree(watched, catalog)
    found = run_hotfix("catalog", "watch", "--catalog", catalog, "watch-applies", "watch-fixed", "mamba-copy", "--json")
    assert found.returncode == 4, found.stderr  # mamba-copy conflicts
    doc = json.loads(found.stdout)
    states = {(r["hotfix"], r["release"]): r["state"] for r in doc["rows"]}
    assert {states[("watch-applies@1", r)] for r in NEW} == {"still-applies"}
    assert {states[("watch-fixed@1", r)] for r in NEW} == {"fixed-upstream"}
    assert {states[("mamba-copy@1", r)] for r in NEW} == {"conflicts"}
    assert all("port: conflicts" in r["detail"] for r in doc["rows"] if r["hotfix"] == "mamba-copy@1")
    proposals = {p["hotfix"]: p for p in doc["proposals"]}
    assert proposals["watch-fixed@1"]["fixed_in"] == "0.32.0"
    assert proposals["watch-applies@1"]["extend_to"] == "0.34.0"
    assert proposals["watch-applies@1"]["versions"].startswith(">=0.31.0,<")
    before = {p: p.read_bytes() for p in (catalog / "manifests").iterdir()}
    written = run_hotfix("catalog", "watch", "--catalog", catalog, "watch-applies", "watch-fixed", "--write")
    assert written.returncode == 0, written.stderr
    assert '+fixed_in = "0.32.0"' in written.stdout and "-versions = \">=0.31.0,<0.32.0\"" in written.stdout
    assert (catalog / "manifests" / "mamba-copy.toml").read_bytes() == before[catalog / "manifests" / "mamba-copy.toml"]
    again = run_hotfix("catalog", "watch", "--catalog", catalog, "watch-applies", "watch-fixed", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["proposals"] == []
    assert all(r["declared"] or r["state"] == "current" for r in json.loads(again.stdout)["rows"])
    assert any(r["state"] == "current" and r["hotfix"] == "watch-applies@1" for r in json.loads(again.stdout)["rows"])
    assert run_hotfix("check-catalog", "--catalog", catalog, "watch-applies", "--versions", "0.34.0").returncode == 0


def test_since_must_be_a_release(run_hotfix):
    done = run_hotfix("catalog", "watch", "--since", "banana")
    assert done.returncode == 2 and "not a release number" in done.stderr

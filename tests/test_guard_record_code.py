"""One verdict in every mode (issue 43, item 4), fast: what a record keeps for the guard and how the guard
under HOTFIX_REQUIRE alone uses it, on a real recorded apply of a small tree (`apply --patch --root`):
the code names (a rebinding is shadowed, as under HOTFIX_LOCK; a record from before them is unknown, and
the command printed records them), and the catalog's pin where a catalog is at hand (vllm_hotfix_guard/pins.py).
The real vLLM: tests/test_guard_vllm_record_code.py and tests/commands/test_one_verdict.py."""

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

from fixtures.smalltree import DIFF, apply_small_tree
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.txn.state import TargetState, parse_state, seal_of

GUARD = r'''
import json, os, sys
if os.environ.get("REBIND"):  # a plugin that ran before the guard's check
    import pkg.mod

    def f():
        return 1
    pkg.mod.f = f
from vllm_hotfix_guard import plugin
failing = plugin._check_here("", "fix")
print(json.dumps([[v.hotfix_id, v.detail, v.remedy] for v in failing]))
'''


@pytest.fixture
def applied(tmp_path, run_hotfix):
    return apply_small_tree(tmp_path, run_hotfix)


def guard(root: Path, tmp_path: Path, **env) -> list:
    done = subprocess.run([sys.executable, "-c", GUARD], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(root), **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_apply_keeps_the_names_its_change_touches_under_the_seal(applied):
    _, tdir = applied
    (entry,) = json.loads(tdir.state_file.read_text())["series"]
    assert entry["code"] == {"pkg/mod.py": [{"name": "f", "kind": "function"}]}
    state = TargetState.load(tdir.directory)
    assert entry["seal"] == seal_of(state.target, state.hotfixes["fix"])
    forged = dict(entry, code={"pkg/mod.py": [{"name": "g", "kind": "function"}]})  # the names are sealed
    assert seal_of(state.target, parse_state(json.dumps({"schema": 2, "target": state.target, "series": [forged]})
                                             .encode(), "x")[1]["fix"]) != entry["seal"]


def test_a_record_without_names_keeps_its_old_seal_and_bad_names_are_refused_by_key_path(applied):
    _, tdir = applied
    doc = json.loads(tdir.state_file.read_text())
    (entry,) = doc["series"]
    old = dict(entry)
    del old["code"]
    target, hotfixes = parse_state(json.dumps(dict(doc, series=[old])).encode(), "state.json")
    assert hotfixes["fix"].code is None
    for code, where in (({"pkg/other.py": []}, "series[0].code.pkg/other.py"),
                        ({"pkg/mod.py": [{"name": "f g", "kind": "function"}]}, "series[0].code.pkg/mod.py[0].name"),
                        ({"pkg/mod.py": [{"name": "f", "kind": "lambda"}]}, "series[0].code.pkg/mod.py[0].kind")):
        with pytest.raises(InvalidInput, match=re.escape(f"state.json: {where}")):
            parse_state(json.dumps(dict(doc, series=[dict(entry, code=code)])).encode(), "state.json")


def test_the_guard_under_require_alone_says_shadowed_for_a_rebinding_as_under_a_lock(applied, tmp_path):
    root, _ = applied
    assert guard(root, tmp_path) == []
    (hotfix_id, detail, _), *rest = guard(root, tmp_path, REBIND="1")
    assert hotfix_id == "fix" and detail.startswith("shadowed: f by __main__.f (<string>:"), detail
    assert [r[1] for r in rest] == [f"unknown: module pkg.mod was imported before the guard ran (from "
                                    f"{root / 'pkg' / 'mod.py'}): the code it runs was not checked"]


def test_a_record_from_before_the_names_is_unknown_and_the_printed_command_records_them(applied, tmp_path, run_hotfix):
    root, tdir = applied
    doc = json.loads(tdir.state_file.read_text())
    doc["series"][0].pop("code")
    doc["series"][0]["seal"] = None
    tdir.state_file.write_text(json.dumps(doc))
    ((_, detail, remedy),) = guard(root, tmp_path)
    assert detail.startswith("unknown: its record keeps no code names"), detail
    argv = shlex.split(remedy.split("`")[1])
    assert argv[:2] == ["hotfix", "apply"], remedy
    before = (root / "pkg" / "mod.py").read_bytes()
    done = run_hotfix(*argv[1:])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "pkg" / "mod.py").read_bytes() == before
    (entry,) = json.loads(tdir.state_file.read_text())["series"]
    assert entry["code"] == {"pkg/mod.py": [{"name": "f", "kind": "function"}]} and entry["seal"]
    assert guard(root, tmp_path) == []


MANIFEST = '''schema = 1
id = "{id}"
version = {version}
title = "t"
{kind}
[[patches]]
file = "a.patch"
sha256 = "{old}"
versions = "<1.0"

[[patches]]
file = "b.patch"
sha256 = "{new}"
versions = ">=1.0"
'''


def test_the_pin_at_hand_is_the_manifest_s_for_the_recorded_release(tmp_path):
    from vllm_hotfix_guard.pins import manifest_pins

    catalog = tmp_path / "cat"
    (catalog / "manifests").mkdir(parents=True)
    (catalog / "patches").mkdir()
    old, new = "a" * 64, "b" * 64
    (catalog / "manifests" / "whatever.toml").write_text(MANIFEST.format(id="x", version=2, kind="", old=old, new=new))
    (catalog / "manifests" / "broken.toml").write_text("id = ")
    env = {"HOTFIX_CATALOG": str(catalog)}
    assert manifest_pins("x", 2, "0.9", env) == ("x@2", [(None, old)])
    assert manifest_pins("x", "2", "1.2", env) == ("x@2", [(None, new)])
    assert manifest_pins("x", 3, "1.2", env) is None  # another version: nothing to pin by, as in status
    assert manifest_pins("x", 2, "1.2", {}) is None   # no catalog at hand
    (catalog / "manifests" / "whatever.toml").write_text(
        MANIFEST.format(id="x", version=2, kind='kind = "advisory"', old=old, new=new))
    assert manifest_pins("x", 2, "1.2", env) is None


def test_the_kernel_pin_check_names_the_kept_patch_and_the_pin(applied):
    from vllm_hotfix_guard.txn.judgement import pin_problem

    _, tdir = applied
    state = TargetState.load(tdir.directory)
    recorded = state.hotfixes["fix"]
    right = hashlib.sha256(DIFF).hexdigest()
    assert pin_problem(state, recorded, [(None, right)], "fix@1") is None
    assert pin_problem(state, recorded, [(None, "c" * 64)], "fix@1") == (
        f"{tdir.directory / recorded.patches[0]}: sha256 mismatch: expected {'c' * 64}, got {right} "
        "(the catalog's pin of fix@1)")
    assert pin_problem(state, recorded, [], "fix@1") == "fix: the record keeps 1 patch(es), fix@1 pins 0"


def test_the_advice_names_a_record_s_catalog_only_where_hotfix_catalog_does_not(monkeypatch, tmp_path, run_hotfix):
    """Pasted in the guard's environment, `--catalog DIR` beside HOTFIX_CATALOG=DIR would read it twice (exit 8)."""
    from vllm_hotfix_guard import wording

    catalog = str(tmp_path / "cat")
    monkeypatch.delenv("HOTFIX_CATALOG", raising=False)
    assert wording.python_option(catalog).endswith(f"--catalog {catalog}")
    monkeypatch.setenv("HOTFIX_CATALOG", catalog)
    assert "--catalog" not in wording.python_option(catalog)


HOTFIX_VERSIONS = [1, "1", "1.0", "01.0", "1.0-1", "1.0.post1", "1.0+a", "1.0+b", "v1.0", "1!1.0", "x", "1.0+", "\u0661"]
RANGES = [None, "==0.23.0rc1", ">=0.30.0rc1,<=0.30.0rc2", ">=0.25.0,<0.32.0", "~=0.30.0", "==0.30.*", "!=0.30.*",
          "!=0.30.0", ">=0.25,!=0.30.0rc2", "==0.30.0+cu128", "===0.30.0", "<0.30.0", ">0.30.0rc1"]
RELEASES = ["0.23.0rc1", "0.23.0-1", "0.29.0", "0.30.0rc1", "0.30.0rc2", "0.30.0rc3", "0.30.0", "0.30", "v0.30.0",
            "0.30.0+cu128", "0.30.0+cu129", "0.30.0.post1", "0.30.1.dev3+g02c7db4c5", "0.31.0", "0.32.0"]


def _one_hotfix_catalog(root: Path, version, ranges) -> Path:
    from fixtures.manifests import manifest_data, write_manifest

    patches = [{"file": f"p{i}.patch", "sha256": f"{i:064x}", **({"versions": r} if r else {})} for i, r in enumerate(ranges)]
    return write_manifest(root, manifest_data(id="one", version=version, supersedes=[], patches=patches))


def test_the_guard_and_the_cli_name_the_same_hotfix_version(tmp_path):
    """The record's version against the manifest's, asked as each side asks it: the CLI's Catalog.get on the
    loaded manifest, the guard's pins.manifest_pins on the same file (both core/pep440.same_version);
    packaging's Version equality (or the same string) is the oracle."""
    from packaging.version import InvalidVersion, Version

    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.catalog.manifest import load_manifest
    from vllm_hotfix_guard.errors import Refused
    from vllm_hotfix_guard.pins import manifest_pins

    for i, written in enumerate(HOTFIX_VERSIONS):
        path = _one_hotfix_catalog(tmp_path / str(i), written, [None])
        catalog = Catalog([load_manifest(path)])
        for recorded in HOTFIX_VERSIONS:
            try:
                cli = catalog.get("one", recorded) is not None
            except Refused:
                cli = False
            guard = manifest_pins("one", recorded, "0.30.0", {"HOTFIX_CATALOG": str(tmp_path / str(i))}) is not None
            try:
                oracle = str(written) == str(recorded) or Version(str(written)) == Version(str(recorded))
            except InvalidVersion:
                oracle = False
            assert cli == guard == oracle, (written, recorded, cli, guard)


def test_the_guard_and_the_cli_choose_the_same_patches_for_a_release(tmp_path):
    """Manifest.patches_for (the CLI) and pins.manifest_pins (the guard) on one manifest whose patches hold
    the ranges manifests use and the exotic ones (both core/pep440.range_takes); packaging's
    SpecifierSet.contains(prereleases=True) is the oracle. A release that is not PEP 440: the CLI refuses
    it (exit 8), the guard takes the unranged patches only."""
    from packaging.specifiers import SpecifierSet

    from vllm_hotfix.catalog.manifest import load_manifest
    from vllm_hotfix_guard.pins import manifest_pins

    manifest = load_manifest(_one_hotfix_catalog(tmp_path, 2, RANGES))
    env = {"HOTFIX_CATALOG": str(tmp_path)}
    for release in RELEASES:
        oracle = [f"{i:064x}" for i, r in enumerate(RANGES) if r is None or SpecifierSet(r).contains(release, prereleases=True)]
        cli = [p.sha256 for p in manifest.patches_for(release)]
        guard = [sha for _, sha in manifest_pins("one", 2, release, env)[1]]
        assert cli == guard == oracle, (release, cli, guard)
        assert all(t.contains(release) == SpecifierSet(t.versions).contains(release, prereleases=True)
                   for t in manifest.targets)
    with pytest.raises(InvalidInput, match="not a PEP 440 version: 'garbage'"):
        manifest.patches_for("garbage")
    assert manifest_pins("one", 2, "garbage", env) == ("one@2", [(None, f"{0:064x}")])

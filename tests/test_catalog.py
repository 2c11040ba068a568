"""Catalog layering (built-in, --catalog, HOTFIX_CATALOG), versions, lookups, and the built-in manifests."""

from __future__ import annotations

import os

import pytest

from fixtures.manifests import manifest_data, write_manifest
from vllm_hotfix.catalog.index import builtin_dir, Catalog, parse_ref
from vllm_hotfix_guard.errors import InvalidInput, Refused, UsageError
from vllm_hotfix.catalog.model import check_stats, verify_patch_bytes

BUILTIN_IDS = {m.id for m in Catalog.load(env={}).all()}


def versions_catalog(root, hotfix_id, versions):
    for version in versions:
        write_manifest(root, manifest_data(id=hotfix_id, version=version, supersedes=[]), name=f"{hotfix_id}-{version}")
    return root


def test_layers_builtin_then_catalog_dirs_then_env(tmp_path):
    first = write_manifest(tmp_path / "a", manifest_data(id="from-option")).parent.parent
    second = write_manifest(tmp_path / "b", manifest_data(id="from-env")).parent.parent
    third = write_manifest(tmp_path / "c", manifest_data(id="from-env-too")).parent.parent
    env = {"HOTFIX_CATALOG": f"{second}{os.pathsep}{os.pathsep}{third}"}
    catalog = Catalog.load([first], env=env)
    assert [d.origin for d in catalog.dirs] == ["built-in", "--catalog", "HOTFIX_CATALOG", "HOTFIX_CATALOG"]
    assert {m.id for m in catalog.all()} == BUILTIN_IDS | {"from-option", "from-env", "from-env-too"}
    assert catalog.get("from-env").patches_dir == second / "patches"


def test_versions_order_numerically_and_get_returns_latest(tmp_path):
    catalog = Catalog.load([versions_catalog(tmp_path, "multi", [2, 10, 1])], env={})
    assert catalog.versions("multi") == (1, 2, 10)
    assert catalog.get("multi").version == 10
    assert catalog.get("multi", "2").version == 2
    assert [m.version for m in catalog.latest() if m.id == "multi"] == [10]


def test_string_versions_compare_as_pep440(tmp_path):
    catalog = Catalog.load([versions_catalog(tmp_path, "strs", ["1.9", "1.10", "v2"])], env={})
    assert catalog.versions("strs") == ("1.9", "1.10", "v2")
    assert catalog.get("strs", "2").version == "v2"


def test_the_same_id_and_version_twice_names_both_files(tmp_path):
    a = write_manifest(tmp_path / "a", manifest_data(id="dup", version=3))
    b = write_manifest(tmp_path / "b", manifest_data(id="dup", version="3"), name="other-name")
    with pytest.raises(InvalidInput) as caught:
        Catalog.load([tmp_path / "a"], env={"HOTFIX_CATALOG": str(tmp_path / "b")})
    assert caught.value.message == f"hotfix dup version 3 is declared twice: {a} and {b}"


def test_unknown_id_is_refused_with_a_close_match(tmp_path):
    catalog = Catalog.load([versions_catalog(tmp_path, "demo-conv-null-slot", [1])], env={})
    with pytest.raises(Refused) as caught:
        catalog.get("demo-conv-nul-slot")
    assert caught.value.message == "unknown hotfix 'demo-conv-nul-slot'"
    assert caught.value.hint.startswith("did you mean 'demo-conv-null-slot'? `hotfix list` shows")
    with pytest.raises(Refused, match="hotfix 'demo-conv-null-slot' has no version 7") as caught:
        catalog.get("demo-conv-null-slot", 7)
    assert caught.value.hint == "known versions: 1"


def test_bad_catalog_directories_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="HOTFIX_CATALOG: catalog directory .*/nope does not exist"):
        Catalog.load(env={"HOTFIX_CATALOG": str(tmp_path / "nope")})
    (tmp_path / "cat" / "manifests").mkdir(parents=True)
    with pytest.raises(UsageError, match="is not a catalog") as caught:
        Catalog.load([tmp_path / "cat" / "manifests"], env={})
    assert caught.value.hint == "point at its parent directory"


def test_a_broken_user_manifest_names_its_file(tmp_path):
    bad = manifest_data(id="bad")
    bad["patches"][0]["strip"] = -1
    path = write_manifest(tmp_path, bad)
    with pytest.raises(InvalidInput) as caught:
        Catalog.load([tmp_path], env={})
    assert caught.value.message == f"{path}: patches[0].strip: must not be negative"


def test_parse_ref():
    assert parse_ref("qwen38-flash-next") == ("qwen38-flash-next", None)
    assert parse_ref("qwen38-flash-next@5") == ("qwen38-flash-next", "5")
    with pytest.raises(UsageError):
        parse_ref("x@")


def builtin_file_patches():
    for manifest in Catalog.load(env={}).all():
        assert manifest.source.parent == builtin_dir() / "manifests"
        for spec in manifest.patches:
            if spec.kind == "file":
                yield manifest, spec


@pytest.mark.skipif(not BUILTIN_IDS, reason="the built-in catalog is empty")
def test_every_builtin_patch_file_exists_with_its_pinned_md5_and_sha256():
    for manifest, spec in builtin_file_patches():
        verify_patch_bytes(spec, manifest.patch_path(spec).read_bytes())


@pytest.mark.skipif(not BUILTIN_IDS, reason="the built-in catalog is empty")
def test_every_builtin_patch_file_has_its_declared_stats_before_excludes():
    diff = pytest.importorskip("vllm_hotfix_guard.core.diff", reason="stats need the diff parser")
    for manifest, spec in builtin_file_patches():
        data = manifest.patch_path(spec).read_bytes()
        check_stats(spec, diff.parse_patch(data, strip=spec.strip, source=spec.file).stats)

"""The pure parts of `hotfix port`: variant ranges, narrowing existing ranges, and editing manifest text
so that every other byte of the author's manifest stays."""

from __future__ import annotations

import pytest

from vllm_hotfix.catalog.manifest import load_manifest
from vllm_hotfix.catalog.manifest_text import edit_patches, patch_row
from vllm_hotfix.catalog.model import PatchSpec, PatchStats
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix.flow.port_plan import variant_range

PUBLISHED = ["0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.31.0", "0.32.0"]
REPO_MANIFEST = "manifests/mamba-align-block-size.toml"


@pytest.mark.parametrize("members,expected", [
    (["0.26.0"], ">=0.26.0,<0.27.0"),
    (["0.27.0", "0.27.1", "0.28.0", "0.31.0"], ">=0.27.0,<0.32.0"),
    (["0.27.0", "0.28.0"], ">=0.27.0,<0.31.0,!=0.27.1"),  # a release between them belongs to another variant
    (["0.32.0"], ">=0.32.0,<=0.32.0"),                    # the newest published: no next release to stop at
])
def test_variant_range_covers_exactly_its_releases(members, expected):
    assert variant_range(members, PUBLISHED) == expected


def _new_spec() -> PatchSpec:
    return PatchSpec(kind="file", file="mamba-align-block-size/0.33.0.patch", versions=">=0.33.0,<0.34.0",
                     sha256="a" * 64, md5="b" * 32, stats=PatchStats(1, 13, 1), description="ported")


def test_edit_patches_adds_tables_and_narrows_a_range_keeping_every_other_byte(tmp_path):
    from pathlib import Path

    source = Path(__file__).resolve().parent.parent / REPO_MANIFEST
    manifest = load_manifest(source)
    text = source.read_text()
    edited = edit_patches(text, "x.toml", manifest, versions={2: ">=0.27.0,<0.32.0,!=0.31.0"},
                          added=[patch_row(_new_spec())])
    assert edited.count("[[patches]]") == 4
    assert 'versions = ">=0.27.0,<0.32.0,!=0.31.0"' in edited
    assert edited.startswith(text[:text.index("[[patches]]")])        # comments and top keys untouched
    assert edited.endswith(text[text.index("[[checks]]"):])            # checks and signatures untouched
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "m.toml").write_text(edited)
    again = load_manifest(tmp_path / "manifests" / "m.toml", patches_dir=manifest.patches_dir)
    assert again.patches[3].file == "mamba-align-block-size/0.33.0.patch" and again.checks == manifest.checks


def test_edit_patches_refuses_a_manifest_it_cannot_read_back(tmp_path):
    from pathlib import Path

    source = Path(__file__).resolve().parent.parent / REPO_MANIFEST
    manifest = load_manifest(source)
    broken = source.read_text().replace("[[patches]]", "[[ patches ]] # spaced", 1).replace(
        '[[ patches ]] # spaced', '[[patches]]\n[[patches]]', 1)
    with pytest.raises(InvalidInput):
        edit_patches(broken, "x.toml", manifest, versions={}, added=[patch_row(_new_spec())])

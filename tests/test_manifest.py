"""Manifest loading: strict validation with key paths, version ranges, patch selection, checksums."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from vllm_hotfix_guard.errors import InvalidInput, Refused
from fixtures.manifests import MD5, PATCH_BYTES, SHA, manifest_data, write_manifest  # noqa: F401
from vllm_hotfix.catalog.model import PatchSpec, PatchStats, check_stats, verify_patch_bytes
from vllm_hotfix.catalog.manifest import load_manifest


def test_a_complete_manifest_loads_into_frozen_dataclasses(tmp_path):
    path = write_manifest(tmp_path, manifest_data())
    m = load_manifest(path)
    assert (m.id, m.version, m.title, m.supersedes) == ("demo-fix", 2, "Demo fix", (1,))
    assert m.fixed_in.version == "0.32.0" and m.fixed_in.commit is None
    assert m.targets[0].package == "vllm" and m.targets[0].git is None
    assert [p.kind for p in m.patches] == ["file", "file", "commit"]
    assert m.patches[0].stats == PatchStats(1, 1, 1)
    assert m.patches[1].exclude == ("docs/**",) and m.patches[1].strip == 1
    assert m.requires[0].git.commit == "568afb3a" and m.requires[0].git.clean is True
    assert m.checks[0].contains == "new"
    assert m.references[0].kind == "pr"
    assert m.source == path and m.patches_dir == tmp_path / "patches"
    assert m.patch_path(m.patches[0]).read_bytes() == PATCH_BYTES
    with pytest.raises(AttributeError):
        m.id = "other"


def test_package_defaults_to_distribution_import_name_and_names_compare_normalised(tmp_path):
    data = manifest_data(targets=[{"distribution": "vllm-ascend", "git": {"tag": "v0.30.0rc2", "branch": "releases/v0.30.0"}}])
    m = load_manifest(write_manifest(tmp_path, data))
    assert m.targets[0].package == "vllm_ascend"
    assert m.target_for("vllm_ascend") is m.targets[0]
    assert m.target_for("vllm") is None
    assert m.targets[0].contains("0.1.0")  # a git-only target has no version range


def _drop(*path):
    def change(data):
        node = data
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]
    return change


def _set(path, value):
    def change(data):
        node = data
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    return change


INVALID = [
    (_set(("patches", 1, "sha256"), "abc123"), "patches[1].sha256: expected 64 hex characters"),
    (_set(("patches", 0, "sha256"), SHA.upper()), "patches[0].sha256: expected 64 hex characters"),
    (_set(("patches", 0, "md5"), MD5[:-1]), "patches[0].md5: expected 32 hex characters"),
    (_set(("titel",), "x"), "titel: unknown key (allowed: schema, id, version,"),
    (_set(("patches", 0, "sha265"), SHA), "patches[0].sha265: unknown key"),
    (_set(("version",), True), "version: expected an integer or a string, got a boolean"),
    (_set(("patches", 0, "strip"), "1"), "patches[0].strip: expected an integer, got a string"),
    (_set(("targets", 0, "versions"), ">=0.29 <0.32"), "targets[0].versions: invalid PEP 440 version range '>=0.29 <0.32'"),
    (_set(("id",), "Demo_Fix"), "id: expected lowercase letters, digits and '-'"),
    (_drop("title"), "title: missing required key"),
    (_drop("patches"), "patches: missing required key"),
    (_set(("patches",), []), "patches: needs at least one entry"),
    (_set(("targets",), [{"distribution": "vllm"}]), "targets[0]: needs versions (a PEP 440 range) or git"),
    (_set(("patches", 0, "external"), "x.patch"), "patches[0]: needs exactly one of file, external, commit"),
    (_set(("patches", 1), {"external": "big.patch", "sha256": SHA}), "patches[1].url: missing required key"),
    (_drop("patches", 2, "sha256"), "patches[2].sha256: missing required key"),
    (_set(("references", 0, "kind"), "blog"), "references[0].kind: expected one of pr, commit, issue, repo, doc, advisory, got 'blog'"),
    (_set(("fixed_in",), "soon"), "fixed_in: not a PEP 440 version: 'soon'"),
    (_set(("fixed_in",), {"version": "0.32.0", "commit": "abcdef1"}), "fixed_in: needs exactly one of version, commit"),
    (_set(("fixed_in",), ">=0.23.0,<0.24.0rc1 || <0.20"), "fixed_in: '<0.20' has no lower bound (>=, == or ~=)"),
    (_set(("fixed_in",), {"version": ">=0.23.0 ||"}), "fixed_in.version: an empty specifier set or clause"),
    (_set(("fixed_in",), ">=0.23.0,<0.24.0-x"), "fixed_in: not a PEP 440 version: '0.24.0-x'"),
    (_set(("checks", 0, "not_contains"), "old"), "checks[0]: needs exactly one of contains, not_contains"),
    (_set(("patches", 0, "file"), "../../etc/passwd"), "patches[0].file: expected a relative path without '..'"),
    (_set(("schema",), 2), "schema: unsupported schema 2"),
    (_set(("symptoms",), [1]), "symptoms[0]: expected a string, got an integer"),
    (_set(("requires", 0), {"distribution": "vllm"}), "requires[0].git: missing required key"),
    (_set(("patches", 0, "stats"), {"files": 1, "insertions": 1}), "patches[0].stats.deletions: missing required key"),
    (_set(("patches", 2, "commit"), "HEAD"), "patches[2].commit: expected a commit id"),
    (_set(("supersedes",), [1, 2]), "supersedes: version 2 cannot supersede itself"),
    (_set(("targets", 0, "git"), {"tag": "v1", "clean": "yes"}), "targets[0].git.clean: expected true or false, got a string"),
    (_set(("compiled_changes",), "vllm/vllm-rs"), "compiled_changes: expected an array, got a string"),
    (_set(("compiled_changes",), ["vllm/x.so", 3]), "compiled_changes[1]: expected a string, got an integer"),
    (_set(("compiled_changes",), ["/usr/lib/x.so"]), "compiled_changes[0]: expected a relative path without '..'"),
    (_set(("compiled_changes",), [""]), "compiled_changes[0]: must not be empty"),
]


@pytest.mark.parametrize("change, expected", INVALID, ids=[e for _, e in INVALID])
def test_invalid_manifests_name_file_and_key_path(tmp_path, change, expected):
    data = manifest_data()
    change(data)
    path = write_manifest(tmp_path, data, name="x")
    with pytest.raises(InvalidInput) as caught:
        load_manifest(path)
    assert caught.value.message.startswith(f"{path}: {expected}")
    assert "\n" not in caught.value.message


def test_the_documented_error_form_exactly(tmp_path):
    data = manifest_data()
    data["patches"][1]["sha256"] = SHA[:-1]
    path = write_manifest(tmp_path, data, name="x")
    with pytest.raises(InvalidInput) as caught:
        load_manifest(path)
    assert caught.value.message == f"{path}: patches[1].sha256: expected 64 hex characters"
    assert caught.value.exit_code == 8


def test_toml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text('schema = 1\nid = "x"\ntitle = "unterminated\n')
    with pytest.raises(InvalidInput) as caught:
        load_manifest(path)
    assert caught.value.message.startswith(f"{path}: line 3, column ")
    assert ": invalid TOML: " in caught.value.message and "(at line" not in caught.value.message


def test_unreadable_and_non_utf8_manifests_are_invalid_input(tmp_path):
    with pytest.raises(InvalidInput, match="cannot read manifest"):
        load_manifest(tmp_path / "missing.toml")
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'title = "caf\xe9"\n')
    with pytest.raises(InvalidInput, match="not UTF-8"):
        load_manifest(latin)


@pytest.mark.parametrize("version, inside", [
    ("0.29.0", True), ("0.30.0rc2", True), ("0.31.1.dev3+g1234abc", True), ("0.30.0+cu128", True),
    ("0.28.9", False), ("0.32.0", False), ("0.32.0rc1", False), ("0.29.0rc1", False),
])
def test_version_ranges_match_prereleases(tmp_path, version, inside):
    m = load_manifest(write_manifest(tmp_path, manifest_data()))
    assert m.target_for("vllm").contains(version) is inside
    assert m.target_for("vllm-ascend") is None


def test_patches_for_picks_the_diff_for_the_range_plus_unranged_patches(tmp_path):
    m = load_manifest(write_manifest(tmp_path, manifest_data()))
    assert [p.file or p.commit for p in m.patches_for("0.29.0")] == ["demo-fix/0.29.patch", "f5826a4"]
    assert [p.file or p.commit for p in m.patches_for("0.30.0rc2")] == ["demo-fix/0.30.patch", "f5826a4"]
    assert [p.file or p.commit for p in m.patches_for("0.31.0")] == ["demo-fix/0.30.patch", "f5826a4"]


def test_patches_for_refuses_when_no_patch_fits(tmp_path):
    data = manifest_data()
    data["patches"] = data["patches"][:2]
    m = load_manifest(write_manifest(tmp_path, data))
    with pytest.raises(Refused) as caught:
        m.patches_for("0.28.0")
    assert caught.value.message == "demo-fix@2: no patch for version 0.28.0"
    assert ">=0.29.0,<0.30.0" in caught.value.hint


def test_is_fixed_in_by_version_or_commit(tmp_path):
    m = load_manifest(write_manifest(tmp_path, manifest_data()))
    assert m.is_fixed_in("0.32.0") and m.is_fixed_in("0.33.0")
    assert not m.is_fixed_in("0.31.0") and not m.is_fixed_in("0.32.0rc1") and not m.is_fixed_in(None)
    by_commit = load_manifest(write_manifest(tmp_path, manifest_data(fixed_in={"commit": "abcdef1", "repo": "https://x"})))
    assert not by_commit.is_fixed_in("9.9.9")
    asked = []
    assert by_commit.is_fixed_in(None, commit_checker=lambda commit, repo: asked.append((commit, repo)) or True)
    assert asked == [("abcdef1", "https://x")]


def test_verify_patch_bytes_checks_md5_and_sha256_and_names_both_digests():
    spec = PatchSpec(kind="external", external="big.patch", url="https://x/big.patch", md5=MD5, sha256=SHA)
    verify_patch_bytes(spec, PATCH_BYTES, "big.patch")
    other = PATCH_BYTES + b"\n"
    with pytest.raises(Refused) as caught:
        verify_patch_bytes(spec, other, "/tmp/big.patch")
    assert caught.value.message == f"/tmp/big.patch: md5 mismatch: expected {MD5}, got {hashlib.md5(other).hexdigest()}"
    assert "https://x/big.patch" in caught.value.hint
    only_sha = PatchSpec(kind="file", file="a.patch", sha256=SHA)
    with pytest.raises(Refused, match=f"a.patch: sha256 mismatch: expected {SHA}, got {hashlib.sha256(other).hexdigest()}"):
        verify_patch_bytes(only_sha, other)
    wrong_sha_right_md5 = PatchSpec(kind="file", file="a.patch", md5=MD5, sha256="0" * 64)
    with pytest.raises(Refused, match="sha256 mismatch"):
        verify_patch_bytes(wrong_sha_right_md5, PATCH_BYTES)


def test_check_stats_refuses_a_patch_of_the_wrong_size():
    spec = PatchSpec(kind="external", external="q.patch", url="u", sha256=SHA, stats=PatchStats(135, 27358, 248))
    check_stats(spec, SimpleNamespace(files=135, insertions=27358, deletions=248))
    with pytest.raises(Refused) as caught:
        check_stats(spec, SimpleNamespace(files=134, insertions=27000, deletions=248))
    assert caught.value.message == "q.patch: expected 135 files +27358/-248, got 134 files +27000/-248"
    check_stats(PatchSpec(kind="file", file="a", sha256=SHA), SimpleNamespace(files=9, insertions=9, deletions=9))

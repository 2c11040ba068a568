"""A catalog release as an OCI artifact (`catalog publish --oci`, `catalog add NAME oci:LAYOUT[:TAG]`): the
layout is byte-reproducible and an image-spec 1.1 artifact (empty config, one titled layer per release
file); a subscriber reads it like any URL, an archive blob that is not its descriptor's bytes is refused (13), and a
layout rebuilt around a tampered archive is refused by the signed metadata (13), the cache unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from fixtures.feed import Key, tree_bytes, write_policy
from fixtures.manifests import manifest_data, write_manifest
from vllm_hotfix.catalog.release_archive import build_archive, read_archive
from vllm_hotfix.catalog.release_oci import ARTIFACT_TYPE, layout_files


@pytest.fixture
def keys(tmp_path):
    return {name: Key(tmp_path, name) for name in ("release", "sre")}


def publish(run_hotfix, tmp_path, keys, oci: Path, *extra):
    done = run_hotfix("catalog", "publish", tmp_path / "catalog", "--to", tmp_path / "out", "--oci", oci,
                      "--key", keys["release"].key, "--key", keys["sre"].key, *extra)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_publish_writes_a_reproducible_oci_artifact_a_host_subscribes_to(run_hotfix, tmp_path, keys, _isolated_state):
    write_manifest(tmp_path / "catalog", manifest_data(id="team-fix", version=1, supersedes=[]), name="team-fix")
    write_policy(tmp_path / "trust.toml", keys, ("release", "sre"), 2)
    fixed = ("--expires", "2099-01-01T00:00:00Z", "--version", "1")
    publish(run_hotfix, tmp_path, keys, tmp_path / "oci-a", *fixed)
    (tmp_path / "out").rename(tmp_path / "out-a")
    publish(run_hotfix, tmp_path, keys, tmp_path / "oci-b", *fixed)
    assert tree_bytes(tmp_path / "oci-a") == tree_bytes(tmp_path / "oci-b")
    index = json.loads((tmp_path / "oci-a" / "index.json").read_bytes())
    digest = index["manifests"][0]["digest"]
    manifest_bytes = (tmp_path / "oci-a" / "blobs" / "sha256" / digest[7:]).read_bytes()
    assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == digest
    manifest = json.loads(manifest_bytes)
    assert manifest["artifactType"] == ARTIFACT_TYPE and manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    titles = {layer["annotations"]["org.opencontainers.image.title"] for layer in manifest["layers"]}
    assert titles == set(p.name for p in (tmp_path / "out").iterdir())

    added = run_hotfix("catalog", "add", "mirrored", f"oci:{tmp_path / 'oci-a'}:latest", "--trust", tmp_path / "trust.toml")
    assert added.returncode == 0, added.stderr
    assert "team-fix" in run_hotfix("list").stdout
    cache = _isolated_state / "feeds" / "mirrored" / "release"
    before = tree_bytes(cache)

    publish(run_hotfix, tmp_path, keys, tmp_path / "oci-a")  # release 2, the layout replaced whole
    layer = next(p for p in (tmp_path / "oci-a" / "blobs" / "sha256").iterdir() if p.read_bytes()[:2] == b"\x1f\x8b")
    good = layer.read_bytes()
    layer.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    broken = run_hotfix("catalog", "update", "mirrored")
    assert broken.returncode == 13 and "does not hold the bytes its descriptor names" in broken.stderr
    assert tree_bytes(cache) == before
    layer.write_bytes(good)

    run_hotfix("catalog", "remove", "mirrored")
    assert run_hotfix("catalog", "add", "mirrored", f"oci:{tmp_path / 'oci-a'}", "--trust", tmp_path / "trust.toml").returncode == 0
    before = tree_bytes(cache)
    publish(run_hotfix, tmp_path, keys, tmp_path / "oci-a")  # release 3: its signed metadata, a forged archive
    out = tmp_path / "out"
    files = read_archive(next(out.glob("catalog-*.tar.gz")).read_bytes(), "archive")
    files["manifests/team-fix.toml"] += b"# planted\n"
    release = {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith("catalog-")}
    release[next(out.glob("catalog-*.tar.gz")).name] = build_archive(files)  # a layout rebuilt around it
    forged = tmp_path / "oci-forged"
    for name, body in layout_files(release).items():
        (forged / name).parent.mkdir(parents=True, exist_ok=True)
        (forged / name).write_bytes(body)
    (_isolated_state / "feeds" / "mirrored" / "subscription.json").write_text(
        (_isolated_state / "feeds" / "mirrored" / "subscription.json").read_text().replace(str(tmp_path / "oci-a"), str(forged)))
    tampered = run_hotfix("catalog", "update", "mirrored")
    assert tampered.returncode == 13 and "TAMPERED" in tampered.stderr, tampered.stderr
    assert tree_bytes(cache) == before
    relative = run_hotfix("catalog", "add", "rel", "oci:relative/layout", "--trust", tmp_path / "trust.toml")
    assert relative.returncode == 2

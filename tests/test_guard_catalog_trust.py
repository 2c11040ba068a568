"""The guard under HOTFIX_REQUIRE applies the trust policy's ``catalogs = "signed"`` as `hotfix` does, with
the same verdict (vllm_hotfix_guard/txn/catalog_sums.directory_verdict): a HOTFIX_CATALOG directory that
does not verify gives no pin, and every required record is unknown with its line and advice, where `hotfix
status` refuses to run; a signed one pins as before; a policy without it changes nothing. Fast: a real
recorded catalog apply on a small checkout (`apply ID --root --catalog`), keys signed by `hotfix sign` (real
minisign files: tests/fixtures/feed.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.feed import Key, write_policy
from fixtures.manifests import write_patch_catalog
from fixtures.smalltree import DIFF, ORIGINAL

GUARD = r'''
import json
from vllm_hotfix_guard import plugin
print(json.dumps([[v.hotfix_id, v.detail, v.remedy] for v in plugin.check(lock=None, require=("fix",))
                  if not v.in_effect]))
'''


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    return {name: Key(directory, name) for name in ("release", "other")}


@pytest.fixture
def setup(tmp_path, run_hotfix, keys):
    """(tree, catalog, env): ``fix`` from the catalog applied to tree/pkg (a checkout of pkg 1.0), and the
    environment of a guard with HOTFIX_CATALOG and a policy asking for signed catalogs (release's key)."""
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text(ORIGINAL)
    (root / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "1.0"\n')
    catalog = write_patch_catalog(tmp_path / "my catalog", "fix", DIFF, distribution="pkg", versions=">=1.0",
                                  fixed_in=None, title="A fix")
    done = run_hotfix("apply", "fix", "--root", root, "--catalog", catalog)
    assert done.returncode == 0, done.stderr
    policy = write_policy(tmp_path / "trust.toml", keys, ("release",), threshold=1, extra='catalogs = "signed"')
    return root, catalog, {"HOTFIX_CATALOG": str(catalog), "HOTFIX_TRUST": str(policy)}


def guard(root: Path, cwd: Path, env: dict) -> list:
    done = subprocess.run([sys.executable, "-c", GUARD], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(root), **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def sign(run_hotfix, catalog: Path, key: Key) -> None:
    done = run_hotfix("sign", "--catalog", catalog, "--key", key.key)
    assert done.returncode == 0, done.stderr


def status(run_hotfix, root: Path, env: dict):
    return run_hotfix("status", "fix", "--root", root, env=env)


def test_an_unsigned_catalog_gives_no_pin_and_the_advice_signs_it_as_pasted(setup, tmp_path, run_hotfix, keys):
    root, catalog, env = setup
    refused = status(run_hotfix, root, env)
    assert refused.returncode == 11 and "UNSIGNED: catalog" in refused.stderr, refused.stderr
    ((hotfix_id, detail, remedy),) = guard(root, tmp_path, env)
    assert hotfix_id == "fix"
    assert detail.startswith('unknown: HOTFIX_CATALOG holds a catalog the trust policy does not accept (catalogs = '
                             f'"signed"): UNSIGNED: catalog {catalog}: no signature file'), detail
    assert "\n" not in detail + remedy
    command = remedy.split(": ", 1)[1].split(" (")[0]
    assert shlex.split(command) == ["hotfix", "sign", "--catalog", str(catalog), "--key", "KEY"], remedy
    done = run_hotfix(*shlex.split(command.replace("KEY", shlex.quote(str(keys["release"].key))))[1:])
    assert done.returncode == 0, done.stderr  # the advice, pasted with the key: both readers now accept it
    assert status(run_hotfix, root, env).returncode == 0
    assert guard(root, tmp_path, env) == []


def test_a_tampered_catalog_is_refused_by_both_and_its_manifest_never_pins(setup, tmp_path, run_hotfix, keys):
    root, catalog, env = setup
    sign(run_hotfix, catalog, keys["release"])
    assert guard(root, tmp_path, env) == [] and status(run_hotfix, root, env).returncode == 0
    manifest = catalog / "manifests" / "fix.toml"
    manifest.write_text(manifest.read_text().replace("A fix", "A changed fix"))
    refused = status(run_hotfix, root, env)
    assert refused.returncode == 13 and "TAMPERED: catalog" in refused.stderr, refused.stderr
    ((_, detail, remedy),) = guard(root, tmp_path, env)
    assert f"TAMPERED: catalog {catalog}: manifests/fix.toml changed after signing" in detail, detail
    assert detail.startswith("unknown: ") and "or remove it from HOTFIX_CATALOG" in remedy

    from vllm_hotfix_guard import pins

    assert pins.manifest_pins("fix", 1, "1.0", env) is None  # refused: no pin from it
    assert pins.manifest_pins("fix", 1, "1.0", {"HOTFIX_CATALOG": str(catalog)}) is not None  # no policy: as before


def test_a_catalog_signed_by_a_key_the_policy_does_not_list_is_untrusted(setup, tmp_path, run_hotfix, keys):
    root, catalog, env = setup
    sign(run_hotfix, catalog, keys["other"])
    assert status(run_hotfix, root, env).returncode == 12
    ((_, detail, _),) = guard(root, tmp_path, env)
    assert detail.startswith("unknown: ") and f"catalog {catalog}" in detail, detail


def test_a_signed_catalog_pins_from_the_bytes_judged(setup, tmp_path, run_hotfix, keys):
    """Signed and verified, the pin still holds: a record whose kept patch is not the manifest's is unknown."""
    root, catalog, env = setup
    sign(run_hotfix, catalog, keys["release"])
    from vllm_hotfix_guard import pins

    assert pins.manifest_pins("fix", 1, "1.0", env) == ("fix@1", [(None, hashlib.sha256(DIFF).hexdigest())])
    manifest = catalog / "manifests" / "fix.toml"
    manifest.write_text(manifest.read_text().replace(hashlib.sha256(DIFF).hexdigest(), "c" * 64))
    sign(run_hotfix, catalog, keys["release"])  # a signed catalog that pins other bytes than the record keeps
    ((_, detail, _),) = guard(root, tmp_path, env)
    assert "sha256 mismatch: expected " + "c" * 64 in detail, detail


def test_a_policy_without_signed_catalogs_changes_nothing(setup, tmp_path, run_hotfix, keys):
    root, catalog, env = setup
    policy = write_policy(tmp_path / "plain.toml", keys, ("release",), threshold=1)
    plain = dict(env, HOTFIX_TRUST=str(policy))
    assert status(run_hotfix, root, plain).returncode == 0
    assert guard(root, tmp_path, plain) == []
    assert guard(root, tmp_path, {"HOTFIX_CATALOG": str(catalog)}) == []


def test_a_policy_that_cannot_be_used_refuses_the_catalog_too(setup, tmp_path, run_hotfix):
    root, _, env = setup
    broken = dict(env, HOTFIX_TRUST=str(tmp_path / "missing.toml"))
    assert status(run_hotfix, root, broken).returncode == 2
    ((_, detail, remedy),) = guard(root, tmp_path, broken)
    assert detail.startswith("unknown: HOTFIX_CATALOG is set and the trust policy cannot be used: trust policy "), detail
    assert "HOTFIX_TRUST" in remedy


def test_a_patch_record_is_unknown_too_where_status_refuses(tmp_path, run_hotfix, keys):
    """`hotfix status` refuses to run whatever the record: the guard says in effect for no record then."""
    from fixtures.smalltree import apply_small_tree

    root, _ = apply_small_tree(tmp_path, run_hotfix)
    catalog = write_patch_catalog(tmp_path / "other", "other", DIFF, distribution="pkg", versions=">=1.0",
                                  fixed_in=None, title="Another")
    policy = write_policy(tmp_path / "trust.toml", keys, ("release",), threshold=1, extra='catalogs = "signed"')
    env = {"HOTFIX_CATALOG": str(catalog), "HOTFIX_TRUST": str(policy)}
    assert run_hotfix("status", "--root", root, env=env).returncode == 11
    ((_, detail, _),) = guard(root, tmp_path, env)
    assert detail.startswith("unknown: HOTFIX_CATALOG holds a catalog the trust policy does not accept"), detail
    sign(run_hotfix, catalog, keys["release"])
    assert guard(root, tmp_path, env) == []

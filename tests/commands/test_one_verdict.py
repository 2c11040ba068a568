"""One verdict (issue 45): `audit` and `apply` (--dry-run too) ask the judgement `status` gives, the catalog's
pin included, on a real vLLM 0.30.0 install; and the guard under HOTFIX_REQUIRE alone, with the catalog's pin
where the catalog is at hand (issue 43). Each test plays the state, checks every reader's exit code and
that no file changed (the install's file and the state directory, byte for byte)."""

from __future__ import annotations

import difflib
import subprocess
import hashlib
import json
from pathlib import Path

import pytest

from vllm_hotfix_guard.paths import TargetDir
from vllm_hotfix_guard.txn.state import TargetState, seal_of

pytestmark = [pytest.mark.real, pytest.mark.slow]

MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
HOTFIX = "mamba-align-block-size"


def tree_of(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def forge_over_a_file_without_the_fix(tdir: TargetDir, target: Path, pristine: bytes, *, sealed: bool) -> None:
    """The file holds something other than the fix; the record's kept patch, its sha256 and the file's
    after_sha256 are rewritten to say so, then the record is resealed (or its seal removed)."""
    other = pristine + b"# not the fix\n"
    target.write_bytes(other)
    forged = "".join(difflib.unified_diff(pristine.decode().splitlines(True), other.decode().splitlines(True),
                                          f"a/{MAMBA}", f"b/{MAMBA}")).encode()
    doc = json.loads(tdir.state_file.read_text())
    (entry,) = doc["series"]
    (kept,) = entry["patches"]
    (tdir.directory / kept).write_bytes(forged)
    entry.update(patch_sha256=[sha(forged)], seal=None)
    entry["files"][0]["after_sha256"] = sha(other)
    tdir.state_file.write_text(json.dumps(doc))
    if sealed:
        state = TargetState.load(tdir.directory)
        entry["seal"] = seal_of(state.target, state.hotfixes[HOTFIX])
        tdir.state_file.write_text(json.dumps(doc))


GUARD = r'''
import json
from vllm_hotfix_guard import plugin
(v,) = plugin.check(lock=None, require=("mamba-align-block-size",))
print(json.dumps({"in_effect": v.in_effect, "detail": v.detail}))
'''


def guard_verdict(site_packages: Path) -> dict:
    """The guard's verdict under HOTFIX_REQUIRE alone, in a process that imports vLLM from ``site_packages``
    and has vllm-hotfix's built-in catalog beside the guard (this checkout)."""
    import os
    import sys

    done = subprocess.run([sys.executable, "-c", GUARD], capture_output=True, text=True, check=True,
                          env={**{k: v for k, v in os.environ.items() if k not in ("HOTFIX_LOCK", "HOTFIX_CATALOG")},
                               "PYTHONPATH": str(site_packages)})
    return json.loads(done.stdout)


@pytest.mark.parametrize("sealed", [True, False], ids=["resealed", "seal-removed"])
def test_a_record_forged_over_a_file_without_the_fix_is_unknown_to_every_reader(vllm_install, run_hotfix, sealed):
    venv = vllm_install("0.30.0")
    target = venv.site_packages / MAMBA
    pristine = target.read_bytes()
    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    tdir = TargetDir.of(venv.site_packages)
    forge_over_a_file_without_the_fix(tdir, target, pristine, sealed=sealed)
    before, state_before = target.read_bytes(), tree_of(tdir.directory)

    (entry,) = [e for e in json.loads(run_hotfix("status", "--python", venv.python, "--json").stdout)
                if e["id"] == HOTFIX]
    assert entry["state"] == "unknown" and "pin" in entry["detail"], entry
    assert run_hotfix("verify", "--python", venv.python).returncode == 1
    audit = run_hotfix("audit", "vllm", "--python", venv.python)
    assert audit.returncode == 1 and f"recorded: {HOTFIX}@" in audit.stdout and " unknown: " in audit.stdout, audit.stdout
    audit_json = json.loads(run_hotfix("audit", "vllm", "--python", venv.python, "--json").stdout)
    assert [r["state"] for r in audit_json["recorded"]] == ["unknown"]
    guard = guard_verdict(venv.site_packages)  # HOTFIX_REQUIRE alone: the catalog's pin at hand (issue 43)
    assert not guard["in_effect"] and guard["detail"].startswith("unknown: ") and "the catalog's pin of " \
        f"{HOTFIX}@" in guard["detail"], guard
    for dry in (("--dry-run",), ()):
        done = run_hotfix("apply", HOTFIX, "--python", venv.python, *dry)
        assert done.returncode == 8 and "already applied" not in done.stdout, (dry, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
    assert target.read_bytes() == before and tree_of(tdir.directory) == state_before


def _manifest(catalog: Path, version: int, patch: bytes, supersedes: str = "") -> None:
    (catalog / "patches" / "vendor-fix").mkdir(parents=True, exist_ok=True)
    (catalog / "patches" / "vendor-fix" / f"v{version}.patch").write_bytes(patch)
    (catalog / "manifests").mkdir(exist_ok=True)
    (catalog / "manifests" / f"vendor-fix-v{version}.toml").write_text(
        f'schema = 1\nid = "vendor-fix"\nversion = {version}\ntitle = "A vendor patch, v{version}"\n{supersedes}\n'
        f'[[targets]]\ndistribution = "vllm"\nversions = ">=0.30.0,<0.31.0"\n\n[[patches]]\n'
        f'file = "vendor-fix/v{version}.patch"\nsha256 = "{sha(patch)}"\n')


def test_an_older_superseded_version_applied_by_hand_is_named_with_the_way_up(vllm_install, run_hotfix, tmp_path):
    """Issue 45: a vendor patch v1 applied by hand (`git apply`) showed `drifted` and "restore it, then apply";
    status names the version the files hold and the way up, and each step runs as printed."""
    import shlex

    venv = vllm_install("0.30.0")
    target = venv.site_packages / MAMBA
    pristine = target.read_bytes()
    v1_text, v2_text = pristine + b"# vendor fix v1\n", pristine + b"# vendor fix v2\n"

    def diff(new: bytes) -> bytes:
        return "".join(difflib.unified_diff(pristine.decode().splitlines(True), new.decode().splitlines(True),
                                            f"a/{MAMBA}", f"b/{MAMBA}")).encode()

    catalog = tmp_path / "catalog"
    _manifest(catalog, 1, diff(v1_text))
    _manifest(catalog, 2, diff(v2_text), supersedes="supersedes = [1]")
    target.write_bytes(v1_text)  # v1 by hand
    env = {"HOTFIX_CATALOG": str(catalog)}
    (entry,) = [e for e in json.loads(run_hotfix("status", "--python", venv.python, "--json", env=env).stdout)
                if e["id"] == "vendor-fix"]
    assert entry["state"] == "drifted" and "the files hold vendor-fix@1" in entry["detail"], entry
    steps = [s.strip("`") for s in entry["advice"].split(" records it")[0:1] + [entry["advice"].split("then ")[1]]]
    adopt, upgrade = steps[0], steps[1].split(" upgrades")[0].strip("`")
    for step in (adopt, upgrade):
        argv = shlex.split(step)
        assert argv[0] == "hotfix", step
        done = run_hotfix(*argv[1:], env=env)
        assert done.returncode == 0, (step, done.stderr)
    assert target.read_bytes() == v2_text
    (entry,) = [e for e in json.loads(run_hotfix("status", "--python", venv.python, "--json", env=env).stdout)
                if e["id"] == "vendor-fix"]
    assert entry["state"] == "applied" and entry["version"] == 2, entry


def test_an_older_release_s_patched_file_left_in_a_newer_install_has_a_way_out_that_runs(vllm_install, run_hotfix):
    """Issue 45: a 0.30.0 patched file left inside a 0.31.0 install: status said stale and advised `hotfix apply`,
    which exits 3 (baseline not pristine); `rollback` forgets the record and leaves the foreign file. The advice
    first puts the release's own files back (pip, as printed), then apply runs as printed."""
    import os
    import shlex
    import shutil
    import sys

    import realdata

    venv = vllm_install("0.30.0")
    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    patched = (venv.site_packages / MAMBA).read_bytes()
    newer = vllm_install("0.31.0")
    shutil.rmtree(venv.site_packages / "vllm")
    shutil.rmtree(venv.site_packages / "vllm-0.30.0.dist-info")
    shutil.copytree(newer.site_packages / "vllm", venv.site_packages / "vllm", symlinks=True)
    shutil.copytree(newer.site_packages / "vllm-0.31.0.dist-info", venv.site_packages / "vllm-0.31.0.dist-info")
    (venv.site_packages / MAMBA).write_bytes(patched)  # the older release's patched file, left in place
    (entry,) = [e for e in json.loads(run_hotfix("status", "--python", venv.python, "--json").stdout) if e["id"] == HOTFIX]
    assert entry["state"] == "stale", entry
    assert "is not vllm 0.31.0's own file: first `python3 -m pip --python" in entry["advice"], entry["advice"]
    pip, apply = [part.split("`")[1] for part in entry["advice"].split("; then ")]
    wheels = realdata.CACHE / "wheels"
    argv = shlex.split(pip)
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True,
                          env={**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)})
    assert done.returncode == 0, done.stderr[-2000:]
    applied = run_hotfix(*shlex.split(apply)[1:])
    assert applied.returncode == 0, applied.stderr
    (entry,) = [e for e in json.loads(run_hotfix("status", "--python", venv.python, "--json").stdout) if e["id"] == HOTFIX]
    assert entry["state"] == "applied" and entry["installed_version"] == "0.31.0", entry


def test_a_hotfix_catalog_the_signed_policy_refuses_is_refused_by_status_and_the_guard(vllm_install, run_hotfix,
                                                                                       tmp_path):
    """catalogs = "signed" (issue 43): a HOTFIX_CATALOG directory that does not verify makes `status` refuse to
    run and the guard under HOTFIX_REQUIRE say NOT IN EFFECT for the built-in hotfix applied to a real vLLM
    0.30.0; signed by a listed key (`hotfix sign --catalog`, the guard's advice), both accept it."""
    import os
    import shlex
    import sys

    from fixtures.feed import Key, write_policy
    from fixtures.manifests import write_patch_catalog

    venv = vllm_install("0.30.0")
    assert run_hotfix("apply", HOTFIX, "--python", venv.python).returncode == 0
    catalog = write_patch_catalog(tmp_path / "site catalog", "site-fix", b"--- a/x\n+++ b/x\n", distribution="vllm",
                                  versions=">=0.30.0", fixed_in=None, title="A site hotfix")
    key = Key(tmp_path, "release")
    policy = write_policy(tmp_path / "trust.toml", {"release": key}, ("release",), threshold=1,
                          extra='catalogs = "signed"')
    env = {"HOTFIX_CATALOG": str(catalog), "HOTFIX_TRUST": str(policy)}

    def guard() -> dict:
        done = subprocess.run([sys.executable, "-c", GUARD], capture_output=True, text=True, check=True,
                              env={**{k: v for k, v in os.environ.items() if k != "HOTFIX_LOCK"},
                                   "PYTHONPATH": str(venv.site_packages), **env})
        return json.loads(done.stdout)

    refused = run_hotfix("status", "--python", venv.python, env=env)
    assert refused.returncode == 11 and "UNSIGNED: catalog" in refused.stderr, refused.stderr
    verdict = guard()
    assert not verdict["in_effect"] and verdict["detail"].startswith("unknown: HOTFIX_CATALOG holds a catalog the "
                                                                     "trust policy does not accept"), verdict
    command = f"hotfix sign --catalog {shlex.quote(str(catalog))} --key {shlex.quote(str(key.key))}"
    assert run_hotfix(*shlex.split(command)[1:]).returncode == 0
    assert run_hotfix("status", "--python", venv.python, env=env).returncode == 0
    assert guard() == {"in_effect": True, "detail": ""}
    (catalog / "patches" / "planted.patch").write_text("x")
    assert run_hotfix("status", "--python", venv.python, env=env).returncode == 13
    verdict = guard()
    assert not verdict["in_effect"] and "planted.patch is not in the signed list" in verdict["detail"], verdict

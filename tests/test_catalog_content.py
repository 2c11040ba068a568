"""The built-in catalog's content, checked with real tools: git apply and GNU patch on real vLLM wheel
files and on a real git checkout. (The project's own engine is tested by its own modules.)"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vllm_hotfix.catalog.manifest import load_manifest

from fixtures.ascend import (BRANCH, CAUSAL_CONV1D, CONV_STATE, RELEASE_NOTE, TAG, VERSION, make_upstream_clone,
                             make_vllm_ascend_checkout)
from fixtures.qwen import make_qwen_standin

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

CATALOG = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((CATALOG / "manifests").glob("*.toml"))
MAMBA_FILE = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
# The hotfixes and advisories the incident reports (seeds) describe: each can be named, be possible and be confirmed.
SEED_HOTFIXES = {"glm-conv-null-slot", "mamba-align-block-size", "qwen38-flash-next", "flashinfer-mnnvl-allreduce",
                 "qwen38-ple-placeholder", "qwen38-response-format-500", "qwen38-draft-rejected-assert"}
DOCUMENTED_KEYS = {"schema", "after", "conflicts", "id", "version", "title", "description", "symptoms", "fixed_in", "supersedes",
                   "references", "targets", "patches", "requires", "checks", "kind", "signatures", "workaround", "fixed_by",
                   "confirm", "platforms"}


def test_catalog_has_the_three_hotfixes_and_the_advisories():
    assert {"glm-conv-null-slot", "mamba-align-block-size", "qwen38-flash-next"} <= {m.stem for m in MANIFESTS}
    assert {"flashinfer-mnnvl-allreduce", "qwen38-ple-placeholder", "qwen38-response-format-500",
            "qwen38-draft-rejected-assert"} <= {m.stem for m in MANIFESTS}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_manifest_is_toml_with_documented_keys(path):
    raw = tomllib.loads(path.read_text())
    assert set(raw) <= DOCUMENTED_KEYS
    assert raw["schema"] == 1 and raw["id"] == path.stem
    manifest = load_manifest(path)
    assert manifest.title and manifest.description and manifest.references
    assert not manifest.symptoms, "the built-in manifests say what a crash looks like with [[signatures]]"
    roles = {r for s in manifest.signatures for r in s.roles}
    if manifest.signatures or manifest.id in SEED_HOTFIXES:
        assert roles & {"first-error", "error-line"}  # a crash it can be the error of; tiers and contexts: tests/doctor
    if manifest.id in SEED_HOTFIXES:
        tiers = {s.tier for s in manifest.signatures}
        assert {"specific", "condition"} <= tiers and manifest.confirm  # it can be named, be possible, be confirmed
    elif not manifest.signatures:  # a backport without a public log, or a silent error: says so in its comments
        assert "signatures" in path.read_text().split("schema = 1")[0], "say why there are no [[signatures]]"
    if manifest.kind == "advisory":
        assert manifest.workaround and not manifest.patches and not manifest.checks
    else:
        assert manifest.checks and manifest.patches


def _file_patches():
    for path in MANIFESTS:
        for spec in load_manifest(path).patches:
            if spec.kind == "file":
                yield pytest.param(spec, id=spec.file)


@pytest.mark.parametrize("spec", list(_file_patches()))
def test_patch_file_matches_its_pins(spec, tmp_path):
    data = (CATALOG / "patches" / spec.file).read_bytes()
    assert hashlib.md5(data).hexdigest() == spec.md5
    assert hashlib.sha256(data).hexdigest() == spec.sha256
    numstat = subprocess.run(["git", "apply", "--numstat", "-"], input=data, capture_output=True,
                             check=True, cwd=tmp_path).stdout.decode().splitlines()
    counts = [line.split("\t") for line in numstat]
    assert (len(counts), sum(int(c[0]) for c in counts), sum(int(c[1]) for c in counts)) == (
        spec.stats.files, spec.stats.insertions, spec.stats.deletions)


# --- mamba-align-block-size on real wheel files ---------------------------------------------------

MAMBA = load_manifest(CATALOG / "manifests" / "mamba-align-block-size.toml")


def _mamba_release_tree(vllm_wheel, version: str, dest: Path) -> Path:
    with zipfile.ZipFile(vllm_wheel(version)) as wheel:
        data = wheel.read(MAMBA_FILE)
    (dest / MAMBA_FILE).parent.mkdir(parents=True)
    (dest / MAMBA_FILE).write_bytes(data)
    return dest


def _applies(tree: Path, patch: Path) -> tuple[bool, bool]:
    by_git = subprocess.run(["git", "apply", "--check", str(patch)], cwd=tree, capture_output=True)
    by_patch = subprocess.run(["patch", "-p1", "--dry-run", "--fuzz=0", "-s", "-i", str(patch)],
                              cwd=tree, capture_output=True)
    return by_git.returncode == 0, by_patch.returncode == 0


def _mamba_cases():
    # The lowest and highest release of each patch's range, and 0.30.0 (the default real target).
    cases = {"0.25.0": "0.25", "0.25.1": "0.25", "0.26.0": "0.26", "0.27.0": "0.27",
             "0.30.0": "0.27", "0.31.0": "0.27"}
    return [pytest.param(v, f"mamba-align-block-size/{p}.patch", id=v) for v, p in cases.items()]


@pytest.mark.real
@pytest.mark.parametrize("version,patch_file", _mamba_cases())
def test_mamba_patch_applies_to_real_release(version, patch_file, vllm_wheel, tmp_path):
    (chosen,) = MAMBA.patches_for(version)
    assert chosen.file == patch_file
    assert MAMBA.target_for("vllm").contains(version) and not MAMBA.is_fixed_in(version)
    tree = _mamba_release_tree(vllm_wheel, version, tmp_path)
    patch = CATALOG / "patches" / patch_file
    assert _applies(tree, patch) == (True, True)

    subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    patched = (tree / MAMBA_FILE).read_text()
    for check in MAMBA.checks:
        assert (check.contains in patched) if check.contains else (check.not_contains not in patched)
    compile(patched, MAMBA_FILE, "exec")


@pytest.mark.real
def test_mamba_patches_do_not_apply_to_the_fixing_release(vllm_wheel, tmp_path):
    assert MAMBA.is_fixed_in("0.32.0") and not MAMBA.target_for("vllm").contains("0.32.0")
    tree = _mamba_release_tree(vllm_wheel, "0.32.0", tmp_path)
    assert "// mamba_block_size" in (tree / MAMBA_FILE).read_text()
    for spec in MAMBA.patches:
        assert _applies(tree, CATALOG / "patches" / spec.file) == (False, False), spec.file


# --- glm-conv-null-slot on a real git checkout ----------------------------------------------------

GLM = load_manifest(CATALOG / "manifests" / "glm-conv-null-slot.toml")
GLM_ZERO = load_manifest(CATALOG / "manifests" / "glm-conv-null-slot-zero-row.toml")
QWEN = load_manifest(CATALOG / "manifests" / "qwen38-flash-next.toml")


def test_glm_patches_apply_in_order_to_the_release_checkout(tmp_path):
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    for spec in [*GLM.patches_for("0.30.0rc2"), *GLM_ZERO.patches_for("0.30.0rc2")]:
        excludes = [f"--exclude={glob}" for glob in spec.exclude]
        subprocess.run(["git", "apply", "--check", *excludes, str(CATALOG / "patches" / spec.file)],
                       cwd=checkout, check=True)
        subprocess.run(["git", "apply", *excludes, str(CATALOG / "patches" / spec.file)],
                       cwd=checkout, check=True)

    assert not (checkout / RELEASE_NOTE).exists()
    for check in [*GLM.checks, *GLM_ZERO.checks]:
        text = (checkout / check.file).read_text()
        assert (check.contains in text) if check.contains else (check.not_contains not in text)
    changed = subprocess.run(["git", "diff", "--name-only"], cwd=checkout, capture_output=True, text=True,
                             check=True).stdout.split()
    assert {CONV_STATE, CAUSAL_CONV1D} <= set(changed)


def test_glm_second_patch_needs_the_first(tmp_path):
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    assert GLM_ZERO.after == ("glm-conv-null-slot",)
    second = CATALOG / "patches" / GLM_ZERO.patches[0].file
    assert subprocess.run(["git", "apply", "--check", str(second)], cwd=checkout,
                          capture_output=True).returncode != 0


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def _diff_part(mail: str) -> str:
    """The diff of a format-patch mail: from the first 'diff --git' up to the '-- ' signature."""
    body = mail[mail.index("diff --git "):]
    return body[: body.rindex("\n-- \n") + 1] if "\n-- \n" in body else body


def test_upstream_clone_holds_the_commit_the_catalog_patch_was_made_from(tmp_path):
    clone = make_upstream_clone(tmp_path / "upstream")
    assert _git(clone, "rev-parse", "HEAD^").strip() == _git(clone, "rev-parse", f"{TAG}^{{commit}}").strip()
    assert _git(clone, "branch", "--show-current").strip() == BRANCH
    mail = (CATALOG / "patches" / GLM.patches[0].file).read_text()
    assert "f5826a4" in mail and "not in" in mail  # rebuilt from the report's account, not the (unpublished) commit
    made = _git(clone, "format-patch", "-1", "--stdout", "--full-index", "HEAD", "--", "vllm_ascend/")
    assert _diff_part(made) == _diff_part(mail)


def test_vllm_ascend_checkout_is_a_clean_release_checkout(tmp_path):
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    assert _git(checkout, "status", "--porcelain") == ""
    assert _git(checkout, "describe", "--tags", "--exact-match").strip() == TAG
    assert f'version = "{VERSION}"' in (checkout / "pyproject.toml").read_text()


# --- qwen38-flash-next: the stand-in goes through the built-in manifest's shape --------------------

def _numstat(patch: Path, cwd: Path) -> tuple[int, int, int]:
    rows = [line.split("\t") for line in _git(cwd, "apply", "--numstat", str(patch)).splitlines()]
    return len(rows), sum(int(r[0]) for r in rows), sum(int(r[1]) for r in rows)


def test_qwen_builtin_pins_the_published_v6_file():
    (spec,) = QWEN.patches
    assert (spec.kind, spec.external, spec.md5) == ("external", "vllm-ascend-qwen38-flash.patch",
                                                      "282b0a0f7268e198bda7c59bc6c8947e")
    assert (spec.stats.files, spec.stats.insertions, spec.stats.deletions) == (135, 27358, 248)
    assert QWEN.version == 6 and QWEN.supersedes == (1, 2, 3, 4, 5)
    (requirement,) = QWEN.requires
    assert (requirement.git.commit, requirement.git.clean, requirement.root_hint) == (
        "568afb3a", True, "/vllm-workspace/vllm")


def test_qwen_standin_catalogs_pin_their_real_patches(tmp_path):
    standin = make_qwen_standin(tmp_path)
    checkout, vllm_checkout, patch, catalog = standin
    assert _git(checkout, "describe", "--tags", "--exact-match").strip() == "v0.26.0rc1"
    assert _git(vllm_checkout, "status", "--porcelain") == ""
    for version, patch_path, catalog_dir in ((6, patch, catalog), (5, standin.v5_patch, standin.v5_catalog)):
        manifest = load_manifest(catalog_dir / "manifests" / "qwen38-flash-next.toml")
        assert manifest.id == QWEN.id and manifest.version == version
        (spec,) = manifest.patches
        data = patch_path.read_bytes()
        assert spec.external == patch_path.name and spec.md5 == hashlib.md5(data).hexdigest()
        assert _numstat(patch_path, checkout) == (spec.stats.files, spec.stats.insertions, spec.stats.deletions)
        (requirement,) = manifest.requires
        assert standin.vllm_commit.startswith(requirement.git.commit)
        assert requirement.root_hint == str(vllm_checkout)


def test_qwen_standin_versions_are_full_replacements(tmp_path):
    checkout, _, patch, _ = standin = make_qwen_standin(tmp_path)
    _git(checkout, "apply", str(standin.v5_patch))
    assert subprocess.run(["git", "apply", "--check", str(patch)], cwd=checkout, capture_output=True).returncode
    _git(checkout, "apply", "-R", str(standin.v5_patch))
    _git(checkout, "apply", str(patch))
    assert "VLLM_ASCEND_PLE_HOST_OFFLOAD" in (checkout / "vllm_ascend" / "envs.py").read_text()

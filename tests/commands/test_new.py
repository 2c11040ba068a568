"""`hotfix new`: from a real git commit and from a real vLLM 0.30.0 install edited by hand."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fixtures.ascend import CAUSAL_CONV1D, RELEASE_NOTE, make_upstream_clone, make_vllm_ascend_checkout

from vllm_hotfix.catalog.index import builtin_dir
from vllm_hotfix_guard.core.hunk_apply import FileState, plan_patch
from vllm_hotfix_guard.core.diff import parse_patch
from vllm_hotfix.catalog.model import verify_patch_bytes
from vllm_hotfix.catalog.manifest import load_manifest
from vllm_hotfix.catalog.upstream import WheelReader

ZERO_PATCH = builtin_dir() / "patches" / "glm-conv-null-slot" / "0002-zero-the-conv-state-null-slot-row.patch"
MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return make_upstream_clone(tmp_path_factory.mktemp("upstream") / "vllm-ascend")


def _new_from_commit(run_hotfix, clone, out, *extra):
    return run_hotfix("new", "glm-null-slot", "--from-commit", "HEAD", "--repo", clone,
                      "--exclude", "release_notes/**", "--add-patch", ZERO_PATCH,
                      "--target", "vllm-ascend", "--versions", "==0.30.0rc2", "--out", out, *extra)


def test_new_from_commit_writes_a_catalog_entry_that_loads_shows_and_applies(run_hotfix, clone, tmp_path):
    out = tmp_path / "catalog"
    done = _new_from_commit(run_hotfix, clone, out, "--json")
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)

    manifest = load_manifest(out / "manifests" / "glm-null-slot.toml")
    commit, zero = manifest.patches
    sha7 = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert commit.file.startswith(f"glm-null-slot/0001-{sha7}-use-a-non-negative-null-slot")
    assert commit.exclude == ("release_notes/**",)
    assert (commit.stats.files, commit.stats.insertions, commit.stats.deletions) == (5, 73, 6)  # before exclude
    assert zero.file == f"glm-null-slot/0002-{ZERO_PATCH.name}"
    for spec in manifest.patches:
        verify_patch_bytes(spec, manifest.patch_path(spec).read_bytes())
    assert [r.kind for r in manifest.references] == ["commit"]
    assert manifest.targets[0].distribution == "vllm-ascend" and manifest.targets[0].versions == "==0.30.0rc2"
    assert written["manifest"] == str(out / "manifests" / "glm-null-slot.toml")

    listed = run_hotfix("list", "--catalog", out, "--json")
    assert "glm-null-slot" in [m["id"] for m in json.loads(listed.stdout)]
    shown = run_hotfix("show", "glm-null-slot", "--catalog", out)
    assert shown.returncode == 0 and "release_notes/**" in shown.stdout

    checkout = make_vllm_ascend_checkout(tmp_path / "checkout")
    files = [str(manifest.patch_path(s)) for s in manifest.patches]
    subprocess.run(["git", "-C", str(checkout), "apply", "--exclude=release_notes/*", *files], check=True)
    assert not (checkout / RELEASE_NOTE).exists()
    assert "kernel_state[-1].zero_()" in (checkout / CAUSAL_CONV1D).read_text()


def test_new_writes_signature_guidance_and_a_try_it_line_that_works(run_hotfix, clone, tmp_path):
    out = tmp_path / "catalog"
    done = _new_from_commit(run_hotfix, clone, out)
    assert done.returncode == 0, done.stderr
    text = (out / "manifests" / "glm-null-slot.toml").read_text()
    assert "symptoms" not in text and "# [[signatures]]" in text and '# tier = "specific"' in text
    assert "weight" not in text  # the weights-only form could never name a fix
    (line,) = [l for l in done.stderr.splitlines() if l.startswith("hotfix: try it: ")]
    assert f"hotfix show glm-null-slot --catalog {out} && hotfix apply glm-null-slot --catalog {out} --root CHECKOUT --dry-run" in line
    checkout = make_vllm_ascend_checkout(tmp_path / "checkout")
    for command in line.removeprefix("hotfix: try it: ").split(";")[0].split(" && "):
        args = command.replace("CHECKOUT", str(checkout)).split()[1:]
        tried = run_hotfix(*args)
        assert tried.returncode == 0, (command, tried.stdout + tried.stderr)


def test_new_refuses_to_overwrite_an_existing_manifest(run_hotfix, clone, tmp_path):
    out = tmp_path / "catalog"
    assert _new_from_commit(run_hotfix, clone, out).returncode == 0
    manifest = out / "manifests" / "glm-null-slot.toml"
    before = manifest.read_bytes()
    again = _new_from_commit(run_hotfix, clone, out)
    assert again.returncode == 3
    assert again.stderr.startswith(f"hotfix: error: {manifest} already exists")
    assert manifest.read_bytes() == before


def test_new_needs_exactly_one_source(run_hotfix, tmp_path):
    done = run_hotfix("new", "x", "--out", tmp_path)
    assert done.returncode == 2 and "--from-commit" in done.stderr
    assert not (tmp_path / "manifests").exists()


@pytest.mark.real
def test_new_from_install_diffs_hand_edits_against_the_pristine_wheel(run_hotfix, vllm_install, vllm_wheel, tmp_path):
    venv = vllm_install("0.30.0")
    edited = venv.site_packages / MAMBA
    pristine = edited.read_bytes()
    old = b"// self.cache_config.block_size"
    assert pristine.count(old) == 1
    edited.write_bytes(pristine.replace(old, b"// self.cache_config.mamba_block_size"))

    out = tmp_path / "catalog"
    done = run_hotfix("new", "my-mamba-edit", "--from-install", "vllm", "--python", venv.python,
                      "--wheel", vllm_wheel("0.30.0"), "--out", out)
    assert done.returncode == 0, done.stderr

    manifest = load_manifest(out / "manifests" / "my-mamba-edit.toml")
    assert manifest.targets[0].distribution == "vllm" and manifest.targets[0].versions == "==0.30.0"
    (spec,) = manifest.patches
    data = manifest.patch_path(spec).read_bytes()
    patch = parse_patch(data)
    assert [f.path for f in patch.files] == [MAMBA]
    assert (patch.stats.insertions, patch.stats.deletions) == (1, 1)
    with WheelReader(vllm_wheel("0.30.0")) as wheel:
        (edit,) = plan_patch(patch, wheel).edits
    assert edit.before == pristine and edit.after == edited.read_bytes()


@pytest.mark.real
def test_new_from_install_on_top_of_the_recorded_series_holds_only_the_new_edit(run_hotfix, vllm_install, vllm_wheel,
                                                                              tmp_path):
    """The built-in mamba fix applied, then another line of the same file edited by hand: the new patch is
    the difference from what the series leaves there (and goes after it); --include-applied folds it in."""
    venv = vllm_install("0.30.0")
    assert run_hotfix("apply", "mamba-align-block-size", "--python", venv.python).returncode == 0
    edited = venv.site_packages / MAMBA
    applied = edited.read_bytes()
    old = b"        # Chunked prefill does not sample a token, so num_sampled can be 0.\n"
    assert applied.count(old) == 1
    edited.write_bytes(applied.replace(old, old[:-2] + b" (hand edit).\n"))

    done = run_hotfix("new", "on-top", "--from-install", "vllm", "--python", venv.python, "--wheel",
                      vllm_wheel("0.30.0"), "--out", tmp_path / "catalog")
    assert done.returncode == 0, done.stderr
    manifest = load_manifest(tmp_path / "catalog" / "manifests" / "on-top.toml")
    assert manifest.after == ("mamba-align-block-size",)
    patch = parse_patch(manifest.patch_path(manifest.patches[0]).read_bytes())
    assert (patch.stats.insertions, patch.stats.deletions) == (1, 1)  # the hand edit alone
    (edit,) = plan_patch(patch, lambda path: FileState(applied, 0o644) if path == MAMBA else None).edits
    assert edit.after == edited.read_bytes()

    done = run_hotfix("new", "folded", "--from-install", "vllm", "--python", venv.python, "--wheel",
                      vllm_wheel("0.30.0"), "--out", tmp_path / "catalog", "--include-applied")
    assert done.returncode == 0, done.stderr
    assert "also holds the changes of the recorded hotfixes mamba-align-block-size" in done.stderr
    manifest = load_manifest(tmp_path / "catalog" / "manifests" / "folded.toml")
    folded = parse_patch(manifest.patch_path(manifest.patches[0]).read_bytes())
    assert folded.stats.insertions > 1  # mamba's change and the hand edit

    edited.write_bytes(applied)  # only what the series wrote: nothing of its own
    done = run_hotfix("new", "nothing", "--from-install", "vllm", "--python", venv.python, "--wheel",
                      vllm_wheel("0.30.0"), "--out", tmp_path / "catalog")
    assert done.returncode == 3 and "no edit of its own" in done.stderr, done.stderr


@pytest.mark.parametrize("before,after", [
    (b"a\nb\nc\n", b"a\nB\nc\n"),
    (b"a\nb", b"a\nb\nc"),          # no newline at the end, on both sides
    (None, b"new\nfile\n"),         # created by hand
    (b"gone\n", None),              # deleted by hand
    (b"x\n\n\n" * 150 + b"a\n", b"x\n\n\n" * 150 + b"b\n"),   # popular lines: no junk heuristic
])
def test_file_diff_round_trips_through_the_engine(before, after):
    from vllm_hotfix_guard.core.hunk_apply import FileState
    from vllm_hotfix.core.render import file_diff

    data = file_diff("pkg/mod.py", before, after)
    patch = parse_patch(data)
    if before is not None and before.startswith(b"x"):
        assert (patch.stats.insertions, patch.stats.deletions) == (1, 1) and len(data) < 200
    files = {"pkg/mod.py": FileState(before, 0o644)} if before is not None else {}
    (edit,) = plan_patch(patch, files.get).edits
    assert (edit.before, edit.after) == (before, after)


def test_the_signature_example_new_writes_is_the_current_form_and_can_name_the_fix(run_hotfix, clone, tmp_path):
    """Uncommented, the example at the end of a new manifest loads with every tier, a specific signature
    counted only where a name faults, and a [[confirm]] step: check-catalog's naming rule accepts it."""
    from vllm_hotfix.catalog.signatures import naming_problem

    out = tmp_path / "catalog"
    assert _new_from_commit(run_hotfix, clone, out).returncode == 0
    path = out / "manifests" / "glm-null-slot.toml"
    text = path.read_text()
    example = text[text.index("# [[signatures]]"):]
    path.write_text(text[:text.index("# [[signatures]]")] + "".join(
        line[2:] if line.startswith("# ") else line.lstrip("#") for line in example.splitlines(keepends=True)))
    manifest = load_manifest(path)
    assert [(s.tier, s.roles) for s in manifest.signatures] == [
        ("specific", ("fault-report", "traceback")), ("condition", ("config",)), ("generic", ("first-error",))]
    assert manifest.confirm and naming_problem(manifest.signatures) is None

"""`hotfix new --from-release`: a patch release's Python changes as a hotfix for its .0, on real wheels
and real installs (0.25.0 -> 0.25.1 and 0.27.0 -> 0.27.1)."""

from __future__ import annotations

import json
import subprocess

import pytest

from fixtures.releases import wheel_file

CASES = {
    ("0.25.0", "0.25.1"): (["vllm/compilation/passes/fusion/allreduce_rms_fusion.py",
                            "vllm/model_executor/layers/fused_moe/layer.py", "vllm/multimodal/video.py",
                            "vllm/utils/import_utils.py", "vllm/v1/kv_offload/tiering/p2p/manager.py"],
                           ["vllm/_flashmla_C.abi3.so", "vllm/_qutlass_C.abi3.so", "vllm/vllm-rs",
                            "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"]),
    ("0.27.0", "0.27.1"): (["vllm/model_executor/models/qwen3_dspark.py"],
                           ["vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "vllm/vllm-rs"]),
}
# vllm.__version__ as vLLM computes it (vllm/version.py imports vllm/_version.py), without importing
# vllm/__init__ (it needs torch).
VERSION = ("import importlib.util, sys, types; from pathlib import Path; p = Path(sys.argv[1]); "
           "pkg = types.ModuleType('vllm'); pkg.__path__ = [str(p)]; sys.modules['vllm'] = pkg; "
           "s = importlib.util.spec_from_file_location('vllm.version', p / 'version.py'); m = importlib.util.module_from_spec(s); "
           "s.loader.exec_module(m); print(m.__version__)")


@pytest.mark.real
@pytest.mark.parametrize("base,release", list(CASES))
def test_patch_release_as_a_hotfix_for_its_dot_zero(base, release, vllm_install, vllm_template, run_hotfix, tmp_path):
    python_files, compiled = CASES[(base, release)]
    hotfix_id = "vllm-" + release.replace(".", "-")
    made = run_hotfix("new", hotfix_id, "--from-release", f"vllm=={release}", "--base", base, "--out",
                      tmp_path / "catalog", "--json")
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["python"] == python_files and report["excluded"] == ["vllm/_version.py"]
    assert report["compiled_changes"] == compiled
    from vllm_hotfix.catalog.manifest import load_manifest

    manifest = load_manifest(tmp_path / "catalog" / "manifests" / f"{hotfix_id}.toml")  # the strict loader
    assert manifest.compiled_changes == tuple(compiled)
    assert manifest.fixed_in.version == release and manifest.targets[0].versions == f"=={base}"
    shown = run_hotfix("show", hotfix_id, "--catalog", tmp_path / "catalog").stdout
    assert all(path in shown for path in compiled)

    install = vllm_install(base)
    applied = run_hotfix("apply", hotfix_id, "--catalog", tmp_path / "catalog", "--python", install.python)
    assert applied.returncode == 0, applied.stderr
    for path in python_files:
        assert (install.site_packages / path).read_bytes() == wheel_file(release, path), path
    audited = run_hotfix("audit", "vllm", "--python", install.python, "--json")
    assert audited.returncode == 1
    assert sorted(d["path"] for d in json.loads(audited.stdout)["differences"]) == python_files
    version = subprocess.run([str(install.python), "-c", VERSION, str(install.package_dir)], capture_output=True,
                             text=True, check=True).stdout.strip()
    assert version == base

    status = run_hotfix("status", hotfix_id, "--catalog", tmp_path / "catalog", "--python",
                        vllm_template(release).python, "--json")  # the template is only read
    assert status.returncode == 0, status.stdout + status.stderr
    assert [s["state"] for s in json.loads(status.stdout)] == ["fixed-upstream"]


def test_text_output_lists_the_compiled_changes_and_split_by_file(run_hotfix, tmp_path):
    done = run_hotfix("new", "vllm-0-25-1", "--from-release", "vllm==0.25.1", "--out", tmp_path, "--dry-run",
                      "--split-by-file")
    assert done.returncode == 0, done.stderr
    assert "compiled files that differ, NOT included" in done.stdout and "  vllm/vllm-rs" in done.stdout
    manifests = [line for line in done.stdout.splitlines() if line.startswith("would write") and line.endswith(".toml")]
    assert len(manifests) == 5 and any("vllm-0-25-1-multimodal-video.toml" in m for m in manifests)
    assert not (tmp_path / "manifests").exists()


@pytest.mark.parametrize("args", [("--from-release", "vllm0.25.1"), ("--from-release", "vllm==0.25.1", "--base", "0.26.0"),
                                  ("--base", "0.25.0", "--from-install", "vllm")])
def test_bad_release_options_are_usage_errors(run_hotfix, tmp_path, args):
    done = run_hotfix("new", "x", *args, "--out", tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("hotfix: error: ")

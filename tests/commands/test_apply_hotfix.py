"""`hotfix apply ID`: catalog hotfixes on a real vLLM 0.30.0 install and on git checkouts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.ascend import CAUSAL_CONV1D, CONV_STATE, RELEASE_NOTE, make_vllm_ascend_checkout
from fixtures.gitrepo import git
from fixtures.qwen import PATCH_NAME, make_qwen_standin

MAMBA = "mamba-align-block-size"
MAMBA_FILE = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
BUILTIN = Path(__file__).resolve().parents[2]


@pytest.mark.real
def test_mamba_applies_verifies_and_rolls_back_on_0_30_0(run_hotfix, vllm_install):
    venv = vllm_install("0.30.0")
    path = venv.site_packages / MAMBA_FILE
    pristine = path.read_bytes()

    dry = run_hotfix("apply", MAMBA, "--python", venv.python, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"M {MAMBA_FILE} (1 hunk, offset +18 at @@ -101,9 +101,21 @@)" in dry.stdout
    assert path.read_bytes() == pristine

    done = run_hotfix("apply", MAMBA, "--python", venv.python, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["applied"] and report["version"] == 1 and report["target"]["version"] == "0.30.0"
    assert report["files"] == [{"path": MAMBA_FILE, "action": "modify", "old_path": None, "hunks": 1, "offsets": [18]}]
    text = path.read_text()
    assert "// self._mamba_block_size" in text and "// self.cache_config.block_size" not in text
    assert not list((path.parent / "__pycache__").glob("mamba_hybrid.*.pyc"))

    verify = run_hotfix("verify", MAMBA, "--python", venv.python, "--json")
    assert verify.returncode == 0, verify.stdout
    assert [(e["id"], e["state"]) for e in json.loads(verify.stdout)] == [(MAMBA, "applied")]

    done = run_hotfix("rollback", MAMBA, "--python", venv.python)
    assert done.returncode == 0, done.stderr
    assert path.read_bytes() == pristine
    assert run_hotfix("audit", "vllm", "--python", venv.python).returncode == 0
    nothing = run_hotfix("verify", "--python", venv.python)  # nothing recorded any more: nothing proven
    assert nothing.returncode == 1 and "nothing to verify" in nothing.stderr


def _catalog_copy(tmp_path: Path, name: str, edit) -> Path:
    """A test catalog holding the built-in mamba manifest under another id, edited by ``edit``."""
    catalog = tmp_path / name
    shutil.copytree(BUILTIN / "patches", catalog / "patches")
    text = (BUILTIN / "manifests" / f"{MAMBA}.toml").read_text().replace(f'id = "{MAMBA}"', f'id = "{name}"')
    (catalog / "manifests").mkdir()
    (catalog / "manifests" / f"{name}.toml").write_text(edit(text))
    return catalog


def _writes_under(strace_log: Path, root: Path) -> list[str]:
    """Syscalls in the log that open for writing, rename, unlink or create anything under ``root``."""
    found = []
    for line in strace_log.read_text().splitlines():
        if str(root) not in line:
            continue
        if re.search(r"O_WRONLY|O_RDWR|O_CREAT", line) or re.search(r"\b(rename\w*|unlink\w*|mkdir\w*|creat)\(", line):
            found.append(line)
    return found


@pytest.mark.real
@pytest.mark.parametrize("case", ["wrong-md5", "bad-key", "out-of-range"])
def test_refused_before_any_file_is_opened_for_writing(run_hotfix, vllm_install, tmp_path, case):
    if shutil.which("strace") is None:
        pytest.skip("strace not installed")
    edits = {
        "wrong-md5": (lambda t: t.replace('md5 = "b8fc748c8b3eebb7b25dc60241bc8028"',
                                          'md5 = "00000000000000000000000000000000"'), 3, "md5 mismatch"),
        "bad-key": (lambda t: t.replace("fixed_in = ", "fixd_in = "), 8, "fixd_in"),
        "out-of-range": (lambda t: t.replace('versions = ">=0.25.0,<0.32.0"', 'versions = ">=0.25.0,<0.30.0"'), 3,
                         "not applicable: vllm 0.30.0 is outside >=0.25.0,<0.30.0"),
    }
    edit, code, message = edits[case]
    catalog = _catalog_copy(tmp_path, case, edit)
    venv = vllm_install("0.30.0")
    before = (venv.site_packages / MAMBA_FILE).read_bytes()
    log = tmp_path / "strace.log"
    done = subprocess.run(
        ["strace", "-f", "-qq", "-o", str(log), "-e", "trace=%file,%desc",
         sys.executable, "-m", "vllm_hotfix", "apply", case, "--catalog", str(catalog), "--python", str(venv.python)],
        capture_output=True, text=True)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert _writes_under(log, venv.root) == []
    assert (venv.site_packages / MAMBA_FILE).read_bytes() == before


@pytest.mark.real
def test_two_concurrent_applies_one_applies_the_other_finds_it_applied(vllm_install):
    venv = vllm_install("0.30.0")
    path = venv.site_packages / MAMBA_FILE
    argv = [sys.executable, "-m", "vllm_hotfix", "apply", MAMBA, "--python", str(venv.python)]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [p.communicate() + (p.returncode,) for p in (first, second)]
    assert [code for _, _, code in outputs] == [0, 0], outputs
    lines = sorted(out.splitlines()[-1].split(":")[0] for out, _, _ in outputs)
    assert lines[0] == "already applied" and lines[1].startswith(f"applied {MAMBA}@1"), outputs
    text = path.read_text()
    assert text.count("def _mamba_block_size(self) -> int:") == 1


def test_glm_on_the_vllm_ascend_checkout_applies_checks_and_rolls_back_to_the_commit(run_hotfix, tmp_path):
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    first = {e["id"]: e for e in json.loads(run_hotfix("status", "--root", checkout, "--json").stdout)}
    zero = first["glm-conv-null-slot-zero-row"]  # its patch needs the null slot: not "drifted", but what to do
    assert zero["state"] == "not-applied" and "goes on top of glm-conv-null-slot" in zero["detail"]
    assert zero["advice"].startswith("`hotfix apply glm-conv-null-slot --root")
    done = run_hotfix("apply", "glm-conv-null-slot", "--root", checkout)
    assert done.returncode == 0, done.stderr
    assert "cannot tell from here which vllm_ascend the server loads" in done.stderr
    assert not (checkout / RELEASE_NOTE).exists()
    assert "null_block_id = requests" in (checkout / CAUSAL_CONV1D).read_text()
    changed = {line[3:] for line in git(checkout, "status", "--porcelain").splitlines()}
    assert {CONV_STATE, CAUSAL_CONV1D} <= changed
    status = run_hotfix("status", "--root", checkout, "--json")
    states = {e["id"]: e["state"] for e in json.loads(status.stdout)}
    assert (states["glm-conv-null-slot"], states["glm-conv-null-slot-zero-row"]) == ("applied", "not-applied")
    assert states["qwen38-flash-next"] == "not-applicable"

    done = run_hotfix("rollback", "glm-conv-null-slot", "--root", checkout)
    assert done.returncode == 0, done.stderr
    assert git(checkout, "status", "--porcelain") == ""


def test_glm_warns_when_this_interpreter_loads_another_copy(run_hotfix, tmp_path):
    """Seed 002's overlay: PYTHONPATH puts another vllm_ascend first, so patching the checkout proves nothing."""
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    overlay = make_vllm_ascend_checkout(tmp_path / "overlay")
    done = run_hotfix("apply", "glm-conv-null-slot", "--root", checkout, env={"PYTHONPATH": str(overlay)})
    assert done.returncode == 0, done.stderr
    assert f"WARNING: this interpreter loads vllm_ascend from {overlay}/vllm_ascend, not from the patched checkout" \
        in done.stderr


def test_glm_refuses_a_checkout_with_a_touched_file_modified(run_hotfix, tmp_path):
    checkout = make_vllm_ascend_checkout(tmp_path / "vllm-ascend")
    with open(checkout / CONV_STATE, "a") as fh:
        fh.write("# local edit\n")
    done = run_hotfix("apply", "glm-conv-null-slot", "--root", checkout)
    assert done.returncode == 3
    assert f"baseline not pristine: {checkout}: {CONV_STATE} is modified" in done.stderr
    assert git(checkout, "status", "--porcelain").splitlines() == [f" M {CONV_STATE}"]


def _standin_catalogs(standin) -> tuple[str, ...]:
    """The stand-in's catalogs under their own id (the built-in catalog already has qwen38-flash-next v6)."""
    for catalog in (standin.catalog, standin.v5_catalog):
        manifest = catalog / "manifests" / "qwen38-flash-next.toml"
        manifest.write_text(manifest.read_text().replace('id = "qwen38-flash-next"', 'id = "qwen-standin"'))
    return ("--catalog", str(standin.v5_catalog), "--catalog", str(standin.catalog))


def test_qwen_upgrade_v5_to_v6_is_one_transaction_and_rolls_back_clean(run_hotfix, tmp_path):
    standin = make_qwen_standin(tmp_path)
    catalogs = _standin_catalogs(standin)
    root = ("--root", standin.checkout)
    done = run_hotfix("apply", "qwen-standin@5", *root, *catalogs, "--patch-file", standin.v5_patch)
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(run_hotfix("status", "qwen-standin", *root, *catalogs, "--json").stdout)
    assert (entry["state"], entry["version"]) == ("applied", 5)

    wrong = tmp_path / "wrong" / PATCH_NAME
    wrong.parent.mkdir()
    wrong.write_bytes(standin.patch.read_bytes() + b"\n")
    refused = run_hotfix("apply", "qwen-standin", *root, *catalogs, "--patch-file", wrong)
    assert refused.returncode == 3 and "md5 mismatch" in refused.stderr

    done = run_hotfix("apply", "qwen-standin", *root, *catalogs, "--patch-file", standin.patch, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["superseded"] == 5 and report["version"] == 6
    model = (standin.checkout / "vllm_ascend/models/qwen38_flash_next.py").read_text()
    assert "PATCH_VERSION = 6" in model and "PATCH_VERSION = 5" not in model
    runner = (standin.checkout / "vllm_ascend/worker/model_runner_v1.py").read_text()
    assert "v5: counts" not in runner and "v6: align" in runner

    done = run_hotfix("rollback", "qwen-standin", *root)
    assert done.returncode == 0, done.stderr
    assert git(standin.checkout, "status", "--porcelain") == ""


def test_qwen_precondition_names_the_missing_vllm_checkout(run_hotfix, tmp_path):
    standin = make_qwen_standin(tmp_path)
    catalogs = _standin_catalogs(standin)
    shutil.move(standin.vllm_checkout, tmp_path / "elsewhere")
    done = run_hotfix("apply", "qwen-standin", "--root", standin.checkout, *catalogs, "--patch-file", standin.patch)
    assert done.returncode == 3
    assert f"no vllm checkout at {standin.vllm_checkout}" in done.stderr
    assert "pass --checkout vllm=DIR" in done.stderr
    assert git(standin.checkout, "status", "--porcelain") == ""

    moved = ("--checkout", f"vllm={tmp_path / 'elsewhere'}")
    done = run_hotfix("apply", "qwen-standin", "--root", standin.checkout, *catalogs, "--patch-file", standin.patch,
                      *moved)
    assert done.returncode == 0, done.stderr
    bad = run_hotfix("apply", "qwen-standin", "--root", standin.checkout, *catalogs, "--checkout", "vllm")
    assert bad.returncode == 2 and "expected DIST=DIR" in bad.stderr


def test_qwen_precondition_refuses_a_dirty_vllm_checkout(run_hotfix, tmp_path):
    standin = make_qwen_standin(tmp_path)
    catalogs = _standin_catalogs(standin)
    (standin.vllm_checkout / "stray.py").write_text("x = 1\n")
    done = run_hotfix("apply", "qwen-standin", "--root", standin.checkout, *catalogs, "--patch-file", standin.patch)
    assert done.returncode == 3 and "stray.py" in done.stderr, done.stderr
    assert git(standin.checkout, "status", "--porcelain") == ""

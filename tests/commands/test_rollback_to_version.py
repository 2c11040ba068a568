"""Rollback of a superseded upgrade (issue 45), on a real vLLM 0.30.0 install: a vendor patch v5 applied by hand,
adopted (`apply ID@5`), upgraded (`apply ID`, v5 reversed and v6 applied in one transaction). `rollback ID` takes
the hotfix out (the baseline: rollback's meaning, docs/applying.md) and says so with the way back to v5;
`rollback ID --to-version 5` goes back to v5 in one transaction. Every printed step is run as pasted, every
file compared byte for byte, and a refusal changes nothing (the install's file and the state directory)."""

from __future__ import annotations

import difflib
import hashlib
import json
import shlex
from pathlib import Path

import pytest

from vllm_hotfix_guard.paths import TargetDir

pytestmark = [pytest.mark.real, pytest.mark.slow]

MAMBA = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
ID = "vendor-fix"


def tree_of(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def write_manifest(catalog: Path, version: int, pristine: bytes, new: bytes, supersedes: str = "") -> None:
    patch = "".join(difflib.unified_diff(pristine.decode().splitlines(True), new.decode().splitlines(True),
                                         f"a/{MAMBA}", f"b/{MAMBA}")).encode()
    (catalog / "patches" / ID).mkdir(parents=True, exist_ok=True)
    (catalog / "patches" / ID / f"v{version}.patch").write_bytes(patch)
    (catalog / "manifests").mkdir(exist_ok=True)
    (catalog / "manifests" / f"{ID}-v{version}.toml").write_text(
        f'schema = 1\nid = "{ID}"\nversion = {version}\ntitle = "A vendor patch, v{version}"\n{supersedes}\n'
        f'[[targets]]\ndistribution = "vllm"\nversions = ">=0.30.0,<0.31.0"\n\n[[patches]]\n'
        f'file = "{ID}/v{version}.patch"\nsha256 = "{hashlib.sha256(patch).hexdigest()}"\n')


def step(line: str, marker: str) -> list[str]:
    """The first `hotfix ...` in backticks after ``marker`` in ``line``, as a shell splits it."""
    command = line.split(marker, 1)[1].split("`")[1]
    argv = shlex.split(command)
    assert argv[0] == "hotfix", command
    return argv[1:]


@pytest.fixture
def upgraded(vllm_install, run_hotfix, tmp_path):
    """v5 applied by hand, adopted, upgraded to v6; (venv, env, pristine, v5 bytes, v6 bytes)."""
    venv = vllm_install("0.30.0")
    target = venv.site_packages / MAMBA
    pristine = target.read_bytes()
    v5 = pristine.replace(b"// self.cache_config.block_size", b"// max(1, self.cache_config.block_size)")
    v6 = v5.replace(b"// max(1, self.cache_config.block_size)", b"// max(2, self.cache_config.block_size)") \
        + b"# vendor fix v6\n"
    assert len({pristine, v5, v6}) == 3
    catalog = tmp_path / "catalog"
    write_manifest(catalog, 5, pristine, v5)
    write_manifest(catalog, 6, pristine, v6, supersedes="supersedes = [5]")
    env = {"HOTFIX_CATALOG": str(catalog)}
    target.write_bytes(v5)  # v5 by hand (git apply)
    for args in ((f"{ID}@5",), (ID,)):
        done = run_hotfix("apply", *args, "--python", venv.python, env=env)
        assert done.returncode == 0, done.stderr
    assert target.read_bytes() == v6
    return venv, env, pristine, v5, v6


def test_rollback_after_an_upgrade_says_the_way_back_and_to_version_goes_there(upgraded, run_hotfix):
    venv, env, pristine, v5, v6 = upgraded
    target, state_dir = venv.site_packages / MAMBA, TargetDir.of(venv.site_packages).directory
    before = tree_of(state_dir)
    dry = run_hotfix("rollback", ID, "--python", venv.python, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"{ID}@6 was an upgrade from {ID}@5: rollback returns the files to their baseline" in dry.stdout
    assert target.read_bytes() == v6 and tree_of(state_dir) == before
    assert json.loads(run_hotfix("rollback", ID, "--python", venv.python, "--dry-run", "--json",
                                 env=env).stdout)["upgraded_from"] == "5"

    back = step(dry.stdout, "baseline; ")
    assert back[:3] == ["rollback", ID, "--to-version"] and back[3] == "5"
    preview = run_hotfix(*back, "--dry-run", env=env)
    assert preview.returncode == 0 and f"would roll back {ID}@6 to {ID}@5" in preview.stdout, preview.stderr
    assert target.read_bytes() == v6 and tree_of(state_dir) == before
    done = run_hotfix(*back, env=env)  # as pasted
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == v5  # byte for byte what v5 wrote
    (entry,) = [e for e in json.loads(run_hotfix("status", "--python", venv.python, "--json", env=env).stdout)
                if e["id"] == ID]
    assert entry["state"] == "applied" and entry["version"] == 5, entry
    log = run_hotfix("log", "--python", venv.python, "--json", env=env)
    assert log.returncode == 0, log.stderr
    (found,) = json.loads(log.stdout)
    assert [(e["outcome"], e["version"]) for e in found["entries"]] == [("adopted", 5), ("upgraded", 6), ("rolled-back", 6)]
    assert found["entries"][-1]["detail"] == f"back to {ID}@5" and found["entries"][-1]["series"] == [ID]
    after = tree_of(state_dir)
    again = run_hotfix(*back, env=env)  # repeatable: nothing to do
    assert again.returncode == 0 and "nothing to roll back" in again.stdout, again.stdout + again.stderr
    assert target.read_bytes() == v5 and tree_of(state_dir) == after

    out = run_hotfix("rollback", ID, "--python", venv.python, env=env)  # and out: the baseline, audit clean
    assert out.returncode == 0 and "was an upgrade" not in out.stdout, out.stdout
    assert target.read_bytes() == pristine
    assert run_hotfix("audit", "vllm", "--python", venv.python).returncode == 0


def test_a_rollback_of_the_upgrade_prints_the_apply_that_brings_v5_back(upgraded, run_hotfix):
    venv, env, pristine, v5, _ = upgraded
    target = venv.site_packages / MAMBA
    done = run_hotfix("rollback", ID, "--python", venv.python, env=env)
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == pristine
    again = step(done.stdout, "to have that version again: ")
    assert again[:2] == ["apply", f"{ID}@5"]
    assert run_hotfix(*again, env=env).returncode == 0
    assert target.read_bytes() == v5


@pytest.mark.parametrize("case, code", [("unknown version", 3), ("not recorded", 3), ("no such id", 3)])
def test_to_version_refusals_change_nothing(upgraded, run_hotfix, case, code):
    venv, env, pristine, _, v6 = upgraded
    target, state_dir = venv.site_packages / MAMBA, TargetDir.of(venv.site_packages).directory
    if case == "not recorded":
        assert run_hotfix("rollback", ID, "--python", venv.python, env=env).returncode == 0
    before_file, before_state = target.read_bytes(), tree_of(state_dir)
    args = {"unknown version": (ID, "--to-version", "9"), "not recorded": (ID, "--to-version", "5"),
            "no such id": ("vendor-fx", "--to-version", "5")}[case]
    done = run_hotfix("rollback", *args, "--python", venv.python, env=env)
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert target.read_bytes() == before_file and tree_of(state_dir) == before_state
    if case == "not recorded":
        hint = next(line for line in done.stderr.splitlines() if "hint:" in line)
        applied = run_hotfix(*step(hint, "from: "), env=env)  # the hint runs as pasted
        assert applied.returncode == 0, applied.stderr
        assert target.read_bytes() != pristine


def test_an_upgrade_from_a_version_the_catalog_no_longer_has_is_said_without_a_step_that_cannot_run(upgraded,
                                                                                                     run_hotfix):
    venv, env, _, _, v6 = upgraded
    (Path(env["HOTFIX_CATALOG"]) / "manifests" / f"{ID}-v5.toml").unlink()
    dry = run_hotfix("rollback", ID, "--python", venv.python, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"was an upgrade from {ID}@5, which the catalog no longer has" in dry.stderr
    assert "--to-version" not in dry.stdout and (venv.site_packages / MAMBA).read_bytes() == v6

"""Issue 6 end to end on a real vLLM 0.30.0 install standing in for the container's site-packages:
export -> compose (comments kept, both validators) -> "bind mount" -> verify --lock -> rebuild -> lost
-> compose --remove restores the compose file byte for byte."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import realdata
from fixtures.composefiles import LIST_ENV as COMPOSE, validate

pytestmark = pytest.mark.real

HOTFIX = "mamba-align-block-size"
PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
BUGGY = b"// self.cache_config.block_size"


def bind_mount(spec: str, project: Path) -> None:
    """What docker does for `- SOURCE:TARGET:ro` on `up`: the container sees SOURCE's bytes at TARGET."""
    source, target, mode = spec.split(":")
    assert mode == "ro"
    shutil.copyfile(project / source, target)


@pytest.fixture
def exported(tmp_path, vllm_install, run_hotfix):
    venv = vllm_install("0.30.0")
    project = tmp_path / "project"
    project.mkdir()
    done = run_hotfix("export", HOTFIX, "--to", project / "hotfix-export", "--python", venv.python)
    assert done.returncode == 0, done.stderr
    return venv, project


@pytest.mark.tools
def test_export_compose_verify_rebuild_remove(exported, run_hotfix, tmp_path):
    venv, project = exported
    export_dir = project / "hotfix-export"
    lock = json.loads((export_dir / "hotfix.lock").read_text())
    (locked,) = lock["hotfixes"]
    assert lock["site_packages"] == str(venv.site_packages)
    assert (locked["id"], locked["baseline_version"], locked["fixed_in"]) == (HOTFIX, "0.30.0", "0.32.0")
    patched = (export_dir / HOTFIX / PATH).read_bytes()
    pristine = (venv.site_packages / PATH).read_bytes()
    assert BUGGY in pristine and BUGGY not in patched, "export must not touch the install"
    assert b"def _mamba_block_size(self) -> int:" in patched
    code = locked["files"][0].pop("code")
    assert locked["files"] == [{"path": PATH, "sha256": hashlib.sha256(patched).hexdigest(),
                                "baseline_sha256": hashlib.sha256(pristine).hexdigest(), "export": f"{HOTFIX}/{PATH}"}]
    # what the fix changes in code, fingerprinted by the interpreter that runs vLLM (issue 35)
    assert code["interpreter"] == "cpython-311"
    assert [(n["name"], n["kind"]) for n in code["names"]] == [("MambaHybridModelState.add_request", "method"),
                                                               ("MambaHybridModelState._mamba_block_size", "method")]
    from vllm_hotfix_guard.core.codeprint import fingerprints

    assert {n["name"]: n["fingerprint"] for n in code["names"]} == fingerprints(patched, [n["name"] for n in code["names"]])

    compose_file = project / "docker-compose.yml"
    compose_file.write_text(COMPOSE)
    args = ("compose", HOTFIX, "--service", "vllm", "--file", compose_file, "--export-dir", export_dir)
    done = run_hotfix(*args, cwd=project)
    assert done.returncode == 0, done.stderr
    edited = compose_file.read_text()
    mount = f"./hotfix-export/{HOTFIX}/{PATH}:{venv.site_packages}/{PATH}:ro"
    assert f"      - {mount}\n" in edited
    assert "      - ./hotfix-export/hotfix.lock:/etc/vllm-hotfix/hotfix.lock:ro\n" in edited
    assert "      - HOTFIX_LOCK=/etc/vllm-hotfix/hotfix.lock\n" in edited
    for line in COMPOSE.splitlines():
        if "#" in line:
            assert line in edited, f"comment lost: {line}"
    validate(compose_file)
    assert run_hotfix(*args, cwd=project).returncode == 0
    assert compose_file.read_text() == edited, "second run must change nothing"

    bind_mount(mount, project)
    lock_file = export_dir / "hotfix.lock"
    ok = run_hotfix("verify", "--lock", lock_file, "--python", venv.python)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"  {PATH}: code: MambaHybridModelState.add_request (method), MambaHybridModelState._mamba_block_size " \
           "(method) [fingerprints for cpython-311]" in ok.stdout
    assert f"in effect: {HOTFIX}@1" in ok.stdout

    rebuilt = realdata.copy_venv(realdata.vllm_template("0.30.0"), tmp_path / "rebuilt")
    lost = run_hotfix("verify", "--lock", lock_file, "--python", rebuilt.python)
    assert lost.returncode == 1, lost.stdout + lost.stderr
    assert f"lost: {PATH} is the pristine 0.30.0 file: the bind mount is missing" in lost.stdout
    assert f"restore this line in the compose service volumes: - {export_dir}/{HOTFIX}/{PATH}:{rebuilt.site_packages}/{PATH}:ro" in lost.stdout
    fingerprints = [line for out in (ok.stdout, lost.stdout) for line in out.splitlines() if line.startswith("fingerprint: hf1-")]
    assert len(fingerprints) == 2 and fingerprints[0] != fingerprints[1], "the lost mount must show in the fingerprint"
    as_json = run_hotfix("verify", "--lock", lock_file, "--python", rebuilt.python, "--json")
    (entry,) = json.loads(as_json.stdout)
    assert (as_json.returncode, entry["id"], entry["state"]) == (1, HOTFIX, "lost")
    assert entry["files"][0]["state"] == "baseline" and entry["advice"].startswith("lost: ")

    removed = run_hotfix(*args, "--remove", cwd=project)
    assert removed.returncode == 0, removed.stderr
    assert compose_file.read_bytes() == COMPOSE.encode()


def test_drifted_and_fixed_upstream(exported, run_hotfix, tmp_path):
    venv, project = exported
    lock_file = project / "hotfix-export" / "hotfix.lock"
    with open(venv.site_packages / PATH, "ab") as fh:
        fh.write(b"# local edit\n")
    drifted = run_hotfix("verify", "--lock", lock_file, "--python", venv.python)
    assert drifted.returncode == 1 and f"drifted: {PATH} is neither the patched nor the pristine" in drifted.stdout

    lock = json.loads(lock_file.read_text())
    lock["hotfixes"][0].update(baseline_version="0.29.0", fixed_in="0.30.0")  # as if the image were the release with the fix
    newer = tmp_path / "newer.lock"
    newer.write_text(json.dumps(lock))
    fixed = run_hotfix("verify", "--lock", newer, "--python", venv.python)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "fixed-upstream" in fixed.stdout and "drop the mamba-align-block-size bind mounts" in fixed.stdout


def test_export_refuses_a_baseline_that_is_not_pristine(tmp_path, vllm_install, run_hotfix):
    venv = vllm_install("0.30.0")
    with open(venv.site_packages / PATH, "ab") as fh:
        fh.write(b"# edited by hand\n")
    done = run_hotfix("export", HOTFIX, "--to", tmp_path / "out", "--python", venv.python)
    assert done.returncode == 3, done.stderr
    assert f"baseline not pristine: {PATH} (" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.tools
def test_override_dry_run_and_unknown_service(exported, run_hotfix):
    venv, project = exported
    compose_file = project / "docker-compose.yml"
    compose_file.write_text(COMPOSE)
    override = project / "docker-compose.hotfix.yml"
    base = ("compose", HOTFIX, "--service", "vllm", "--file", compose_file, "--export-dir", project / "hotfix-export")

    dry = run_hotfix(*base, "--dry-run", cwd=project)
    assert dry.returncode == 0 and f"+      - ./hotfix-export/{HOTFIX}/{PATH}:" in dry.stdout
    assert compose_file.read_text() == COMPOSE

    done = run_hotfix(*base, "--override", override, cwd=project)
    assert done.returncode == 0, done.stderr
    assert compose_file.read_text() == COMPOSE
    assert override.read_text().startswith("services:\n  vllm:\n    volumes:\n")
    validate(compose_file, override)
    assert run_hotfix(*base, "--override", override, "--remove", cwd=project).returncode == 0
    assert not override.exists()

    wrong = run_hotfix("compose", HOTFIX, "--service", "vlm", "--file", compose_file,
                       "--export-dir", project / "hotfix-export", cwd=project)
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines()[0].endswith("no service 'vlm'; services: vllm, proxy")


def test_export_when_fixed_upstream_exits_5_with_advice(tmp_path, vllm_install, run_hotfix):
    """The built-in manifest, renamed and declared fixed in 0.30.0: the installed 0.30.0 has the fix."""
    from vllm_hotfix.catalog.index import builtin_dir

    catalog = tmp_path / "catalog"
    shutil.copytree(builtin_dir() / "patches", catalog / "patches")
    (catalog / "manifests").mkdir()
    text = (builtin_dir() / "manifests" / f"{HOTFIX}.toml").read_text()
    text = text.replace(f'id = "{HOTFIX}"', 'id = "mamba-fixed-already"').replace('fixed_in = "0.32.0"', 'fixed_in = "0.30.0"')
    (catalog / "manifests" / "mamba-fixed-already.toml").write_text(text)
    venv = vllm_install("0.30.0")
    done = run_hotfix("export", "mamba-fixed-already", "--to", tmp_path / "out", "--python", venv.python, "--catalog", catalog)
    assert done.returncode == 5, done.stderr
    assert "already contains the upstream fix" in done.stderr and "--remove" in done.stderr
    assert not (tmp_path / "out").exists()


def test_export_checks_stats_of_the_pinned_patch_before_excludes(tmp_path, vllm_install, run_hotfix):
    """Stats (and the pins) describe the whole patch file; `exclude` only drops files from what is applied."""
    import subprocess

    from vllm_hotfix.catalog.index import builtin_dir

    venv = vllm_install("0.30.0")
    envs = venv.site_packages / "vllm/envs.py"
    edited = tmp_path / "envs.py"
    edited.write_bytes(envs.read_bytes() + b"# not wanted in the export\n")
    extra = subprocess.run(["diff", "-u", "--label", "a/vllm/envs.py", "--label", "b/vllm/envs.py", envs, edited],
                           capture_output=True).stdout
    data = (builtin_dir() / "patches" / HOTFIX / "0.27.patch").read_bytes() + extra
    catalog = tmp_path / "catalog"
    (catalog / "patches").mkdir(parents=True)
    (catalog / "patches" / "two-files.patch").write_bytes(data)
    (catalog / "manifests").mkdir()
    text = (builtin_dir() / "manifests" / f"{HOTFIX}.toml").read_text()
    text = text.replace(f'id = "{HOTFIX}"', 'id = "mamba-excluding"').replace(
        'file = "mamba-align-block-size/0.27.patch"', 'file = "two-files.patch"\nexclude = ["vllm/envs.py"]').replace(
        'md5 = "b8fc748c8b3eebb7b25dc60241bc8028"', f'md5 = "{hashlib.md5(data).hexdigest()}"').replace(
        'sha256 = "002243b33068cba0ccff7e91a66f76e73cea84c760cb12cbea40006aa9edca9f"',
        f'sha256 = "{hashlib.sha256(data).hexdigest()}"')
    text = text.replace("stats = { files = 1, insertions = 13, deletions = 1 }\n"
                        'description = "0.27.0', "stats = { files = 2, insertions = 14, deletions = 1 }\n"
                        'description = "0.27.0')
    assert "files = 2" in text and hashlib.sha256(data).hexdigest() in text
    (catalog / "manifests" / "mamba-excluding.toml").write_text(text)

    done = run_hotfix("export", "mamba-excluding", "--to", tmp_path / "out", "--python", venv.python,
                      "--catalog", catalog, "--json")
    assert done.returncode == 0, done.stderr
    (hotfix,) = json.loads(done.stdout)["hotfixes"]
    assert [f["path"] for f in hotfix["files"]] == [PATH]

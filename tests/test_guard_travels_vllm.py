"""Issue 33's Done-when on the real vLLM 0.30.0 with torch (realdata.vllm_full_venv), in an "image" that holds
no vllm-hotfix: a derived venv that sees the cached site-packages through a .pth (the cache is never written),
with a symlink farm of its ``vllm`` package in front. `hotfix export`'s mounts are copied onto the derived
site-packages (the patched file, the guard's package and dist-info) as the bind mounts would put them; then
vLLM's own ``load_general_plugins()`` finds and runs the delivered guard, strict mode stops a spawned
process after its patched file is reverted, and `python -m vllm_hotfix_guard verify` exits 0 and then 1
exactly as the host's `hotfix verify --lock` does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import realdata
from fixtures.vllmfull import HOTFIX, LOADER, MAMBA

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    work = tmp_path_factory.mktemp("image")
    cache = realdata.vllm_full_venv("0.30.0")
    subprocess.run([str(cache.python), "-m", "venv", "--without-pip", str(work / "venv")], check=True)
    python = work / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz-image.pth").write_text(f"{cache.site_packages}\n")  # torch & co.: read, never written
    subprocess.run(["cp", "-as", str(cache.site_packages / "vllm"), str(site / "vllm")], check=True)
    shutil.copytree(cache.site_packages / "vllm-0.30.0.dist-info", site / "vllm-0.30.0.dist-info")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VLLM_")) and k != "PYTHONPATH"}
    export = work / "export"
    done = subprocess.run([sys.executable, "-m", "vllm_hotfix", "export", HOTFIX, "--to", str(export), "--python",
                           str(cache.python)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    target = site / MAMBA
    target.unlink()  # the farm's link into the cache: replaced, never written through ("bind mount")
    shutil.copyfile(export / HOTFIX / MAMBA, target)
    for top in (export / "guard" / "site-packages").iterdir():
        shutil.copytree(top, site / top.name)
    (work / "loader.py").write_text(LOADER)
    return {"python": python, "site": site, "export": export, "env": env, "work": work,
            "pristine": cache.site_packages / MAMBA, "target": target}


def run(image, *args, **env):
    return subprocess.run([str(image["python"]), *args], capture_output=True, text=True, timeout=600,
                          env={**image["env"], **env}, cwd=image["work"])


def test_the_image_has_no_vllm_hotfix(image):
    show = run(image, "-c", "import importlib.metadata as m, sys\n"
               "for name in ('vllm-hotfix', 'vllm-hotfix-guard'):\n"
               "    try: print(name, m.version(name))\n"
               "    except m.PackageNotFoundError: print(name, None)\n"
               "import importlib.util; print(importlib.util.find_spec('vllm_hotfix'))")
    assert show.stdout.split() == ["vllm-hotfix", "None", "vllm-hotfix-guard", "0.1.0", "None"], show.stdout
    pip = run(image, "-m", "pip", "show", "vllm-hotfix")  # the cache's pip, through the .pth
    assert pip.returncode != 0 and "not found" in (pip.stderr + pip.stdout).lower()


def test_vllms_loader_runs_the_delivered_guard_and_strict_stops_a_reverted_process(image):
    lock = str(image["export"] / "hotfix.lock")
    proc = run(image, "loader.py", HOTFIX_LOCK=lock, HOTFIX_STRICT="1", CHILDREN="spawn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "vllm-hotfix guard pid=" in line]
    assert [line for line in lines if f"{HOTFIX} [lock] in effect" in line and "role=main" in line], lines
    assert [line for line in lines if f"{HOTFIX} [lock] in effect" in line and "role=EngineCore_spawn" in line], lines
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["exitcode"] for r in reports if "child" in r] == [0]

    proc = run(image, "loader.py", HOTFIX_LOCK=lock, HOTFIX_STRICT="1", CHILDREN="spawn",
               REVERT=str(image["target"]), PRISTINE=str(image["pristine"]))
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["exitcode"] for r in reports if "child" in r] == [1], proc.stdout + proc.stderr
    assert "refusing to serve (HOTFIX_STRICT=1" in proc.stdout + proc.stderr
    assert "vllm_hotfix_guard.HotfixNotInEffect" in proc.stderr  # raised by the delivered copy


def test_in_container_verify_exits_0_then_1_like_the_hosts_verify_lock(image):
    lock = image["export"] / "hotfix.lock"

    def both() -> tuple[int, str]:
        guard = run(image, "-m", "vllm_hotfix_guard", "verify", HOTFIX_LOCK=str(lock))
        host = subprocess.run([sys.executable, "-m", "vllm_hotfix", "verify", "--lock", str(lock), "--python",
                               str(image["python"])], capture_output=True, text=True, env=image["env"])
        assert (guard.returncode, guard.stdout) == (host.returncode, host.stdout), (guard.stderr, host.stderr)
        return guard.returncode, guard.stdout

    code, out = both()
    assert code == 0 and out.startswith(f"in effect: {HOTFIX}@"), out
    patched = image["target"].read_bytes()
    image["target"].write_bytes(image["pristine"].read_bytes())
    try:
        code, out = both()
        assert code == 1 and f"NOT IN EFFECT: {HOTFIX}@" in out and "the pristine 0.30.0 file" in out, out
    finally:
        image["target"].write_bytes(patched)

"""hotfix installed as a CLI with `uv tool install` (its own venv, no pip, no vLLM): listing and
downloading wheels go through the index pip is configured with (a real PEP 503 index on 127.0.0.1),
and the target interpreter comes from the `vllm` command on PATH."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

import realdata
from fixtures.localindex import build_wheel, isolated_pip_env, serve, write_simple_index
from fixtures.manifests import write_manifest

pytestmark = [pytest.mark.real, pytest.mark.slow]

MOD = "tinypkg/mod.py"


def _run(argv, env=None, **kw) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("HOTFIX_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    full.update(env or {})
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=full, timeout=600, **kw)


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    """`uv tool install` of this project's freshly built wheel; the `hotfix` it puts in its bin dir."""
    tmp = tmp_path_factory.mktemp("uvtool")
    wheel = realdata.build_project_wheel(tmp / "build")
    uv_venv = realdata.make_venv(tmp / "uv-venv")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(uv_venv.python), "install", "-q",
                    "--disable-pip-version-check", "uv"], check=True)
    env = {"UV_TOOL_DIR": str(tmp / "tools"), "UV_TOOL_BIN_DIR": str(tmp / "bin"), "UV_NATIVE_TLS": "1"}
    done = _run([uv_venv.root / "bin" / "uv", "tool", "install", "--python", sys.executable, wheel], env=env)
    assert done.returncode == 0, done.stderr
    hotfix = tmp / "bin" / "hotfix"
    assert hotfix.is_file()
    no_pip = _run([tmp / "tools" / "vllm-hotfix" / "bin" / "python", "-m", "pip", "--version"])
    assert no_pip.returncode != 0 and "No module named pip" in no_pip.stderr  # the situation of the issue
    return hotfix


@pytest.fixture
def index(tmp_path):
    wheels = [build_wheel(tmp_path / "build", "tinypkg", v, {"tinypkg/__init__.py": b"",
                                                             MOD: b"def f():\n    return 1\n"}, size_pad=200_000)
              for v in ("1.0.0", "1.1.0")]
    write_simple_index(tmp_path / "www", "tinypkg", wheels)
    server = serve(tmp_path / "www")
    yield server, wheels
    server.stop()


def test_check_catalog_through_the_tool_install(tool, index, tmp_path):
    server, _ = index
    patch = f"--- a/{MOD}\n+++ b/{MOD}\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n".encode()
    write_manifest(tmp_path / "catalog", {"schema": 1, "id": "tiny-fix", "version": 1, "title": "tiny",
                                          "targets": [{"distribution": "tinypkg", "versions": ">=1.0"}],
                                          "patches": [{"file": "tiny/0.patch", "sha256": hashlib.sha256(patch).hexdigest()}]})
    (tmp_path / "catalog" / "patches" / "tiny" / "0.patch").write_bytes(patch)
    done = _run([tool, "check-catalog", "tiny-fix", "--catalog", tmp_path / "catalog", "--json"],
                env=isolated_pip_env(tmp_path, server.url))
    assert done.returncode == 0, done.stderr
    assert [(c["release"], c["state"]) for c in json.loads(done.stdout)["cells"]] == [
        ("1.0.0", "applies"), ("1.1.0", "applies")]
    assert "hotfix: downloaded tinypkg-1.1.0-py3-none-any.whl (" in done.stderr


def test_new_from_install_and_the_default_interpreter_through_the_tool_install(tool, index, tmp_path):
    server, wheels = index
    target = realdata.make_venv(tmp_path / "target")
    realdata.pip_install(target, str(wheels[1]))
    (target.site_packages / MOD).write_text("def f():\n    return 2\n")  # edited by hand in the "container"
    # a console script named vllm in the target venv, as pip writes them: hotfix finds the interpreter through it
    (target.root / "bin" / "vllm").write_text(f"#!{target.python}\nimport sys\nsys.exit(0)\n")
    (target.root / "bin" / "vllm").chmod(0o755)
    env = isolated_pip_env(tmp_path, server.url)
    env["PATH"] = f"{target.root / 'bin'}{os.pathsep}{os.environ['PATH']}"
    done = _run([tool, "new", "tiny-local", "--from-install", "tinypkg", "--out", tmp_path / "out"], env=env)
    assert done.returncode == 0, done.stderr
    assert f"using {target.python}, the interpreter of {target.root / 'bin' / 'vllm'}" in done.stderr
    assert "hotfix: downloaded tinypkg-1.1.0-py3-none-any.whl (" in done.stderr
    (patch,) = (tmp_path / "out" / "patches" / "tiny-local").glob("*.patch")
    assert "+    return 2" in patch.read_text()
    assert (tmp_path / "cache" / "wheels" / wheels[1].name).read_bytes() == wheels[1].read_bytes()


def test_check_env_and_verify_lock_ask_the_vllm_venv_not_the_tools_own(tool, vllm_install, tmp_path):
    """Issue 24 item 2: hotfix from `uv tool install` (its venv has the guard's entry point), vLLM in a
    separate real venv without vllm-hotfix. `guard --check-env` and `verify --lock` (HOTFIX_LOCK set)
    read the entry points in vLLM's interpreter: no entry point there is NOT IN EFFECT (exit 1); once
    vllm-hotfix is installed there, ok; a guard that fails to import there is named."""
    venv = vllm_install("0.30.0")
    env = {"HOTFIX_PYTHON": str(venv.python)}
    export = tmp_path / "export"
    assert _run([tool, "export", "mamba-align-block-size", "--to", export], env=env).returncode == 0
    assert _run([tool, "apply", "mamba-align-block-size"], env=env).returncode == 0  # the lock is in effect
    lock_env = {**env, "HOTFIX_LOCK": str(export / "hotfix.lock")}
    missing = f"no vllm.general_plugins entry point vllm_hotfix_guard in {venv.python}"

    checked = _run([tool, "guard", "--check-env"], env=lock_env)
    assert checked.returncode == 1 and checked.stdout.startswith(f"NOT IN EFFECT: guard: {missing}"), checked.stdout
    as_json = _run([tool, "guard", "--check-env", "--json"], env=lock_env)
    doc = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and doc["ok"] is False and doc["python"] == str(venv.python)
    assert doc["entry_points"] == [] and doc["problems"][0].startswith(missing) and doc["checks"] == ["HOTFIX_LOCK"]
    verified = _run([tool, "verify"], env=lock_env)
    assert verified.returncode == 1 and "in effect: mamba-align-block-size@" in verified.stdout
    assert f"NOT IN EFFECT: guard: {missing}" in verified.stdout
    as_json = _run([tool, "verify", "--json"], env=lock_env)
    assert as_json.returncode == 1 and json.loads(as_json.stdout)[0]["state"] == "applied"
    assert missing in as_json.stderr

    (wheel,) = (tool.parent.parent / "build" / "dist").glob("vllm_hotfix-*.whl")
    realdata.pip_install(venv, str(wheel))  # now vLLM's interpreter has the guard
    checked = _run([tool, "guard", "--check-env"], env=lock_env)
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.startswith(f"ok: vLLM will load vllm_hotfix_guard in every process started with this "
                                     f"environment by {venv.python}")
    assert _run([tool, "verify"], env=lock_env).returncode == 0

    guard_module = venv.site_packages / "vllm_hotfix_guard" / "plugin.py"
    guard_module.unlink()
    checked = _run([tool, "guard", "--check-env", "--json"], env=lock_env)
    doc = json.loads(checked.stdout)
    assert checked.returncode == 1 and doc["load_error"].startswith("ModuleNotFoundError: No module named "
                                                                    "'vllm_hotfix_guard.plugin'")
    assert doc["problems"][0].startswith(f"the guard fails to import in {venv.python} "
                                         f"(vllm_hotfix_guard:register)")

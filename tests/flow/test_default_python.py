"""No --python, no HOTFIX_PYTHON: hotfix's own interpreter, else the one behind `vllm` on PATH, else a hint."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from vllm_hotfix.install.interpreters import candidate_interpreters, script_interpreter, server_interpreter


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_shebang_forms(tmp_path):
    assert script_interpreter(_script(tmp_path / "a", "#!/opt/venv/bin/python3.12\nimport x\n")) == "/opt/venv/bin/python3.12"
    long_form = "#!/bin/sh\n'''exec' /very/long/path/bin/python \"$0\" \"$@\"\n' '''\nimport x\n"
    assert script_interpreter(_script(tmp_path / "b", long_form)) == "/very/long/path/bin/python"
    assert script_interpreter(_script(tmp_path / "c", f"#!/usr/bin/env {Path(sys.executable).name}\n")) is not None
    assert script_interpreter(_script(tmp_path / "d", "#!/bin/bash\necho\n")) is None
    assert script_interpreter(tmp_path / "missing") is None


def test_server_interpreter_follows_path(tmp_path):
    _script(tmp_path / "bin" / "vllm", f"#!{sys.executable}\n")
    command, python = server_interpreter(str(tmp_path / "bin"))
    assert command == tmp_path / "bin" / "vllm" and python == sys.executable
    assert server_interpreter(str(tmp_path / "nothing")) is None
    assert sys.executable not in candidate_interpreters()


@pytest.mark.real
def test_own_interpreter_without_the_package_uses_the_vllm_command(vllm_template, run_hotfix):
    venv = vllm_template("0.30.0")
    assert (venv.root / "bin" / "vllm").is_file()
    env = {"PATH": f"{venv.root / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    done = run_hotfix("where", "vllm", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["root"] == str(venv.site_packages)
    (line,) = [ln for ln in done.stderr.splitlines() if "interpreter of" in ln]
    assert f"using {venv.root / 'bin' / 'python'}" in line and str(venv.root / "bin" / "vllm") in line
    audit = run_hotfix("audit", "vllm", "--json", env=env)
    assert audit.returncode == 0, audit.stderr


def test_nothing_found_lists_the_interpreters_that_can_import_it_and_the_root_way(run_hotfix, tmp_path):
    """The hint lists only interpreters that find the package (not a system python3 without vLLM), and says
    how to name a source checkout instead (--root)."""
    _script(tmp_path / "bin" / "python3", "#!/bin/sh\nexit 0\n")  # answers nothing: cannot import vllm
    (tmp_path / "lib" / "vllm").mkdir(parents=True)
    (tmp_path / "lib" / "vllm" / "__init__.py").write_text("")
    _script(tmp_path / "bin" / "python", f"#!/bin/sh\nPYTHONPATH={tmp_path / 'lib'} exec {sys.executable} \"$@\"\n")
    done = run_hotfix("where", "vllm", env={"PATH": str(tmp_path / "bin")})
    assert done.returncode == 3
    hint = done.stderr.splitlines()[-1]
    assert "no `vllm` command on PATH" in hint and "for a source checkout, pass --root" in hint
    listed = hint.split("interpreters here that can import vllm: ")[1].split(";")[0].split(", ")
    assert str(tmp_path / "bin" / "python") in listed and str(tmp_path / "bin" / "python3") not in listed
    assert str(tmp_path / "bin" / "python") not in candidate_interpreters(str(tmp_path / "bin"), "vllm_ascend")

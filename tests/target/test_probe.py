import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_hotfix.install import probe


@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_probe_is_stdlib_only_runs_on_every_supported_python_and_ignores_cwd(other_python, version, tmp_path):
    python = other_python(version)
    source = Path(probe.__file__).read_text()
    (tmp_path / "overlay" / "json").mkdir(parents=True)
    (tmp_path / "overlay" / "json" / "__init__.py").write_text("print('side effect on stdout')\n")
    done = subprocess.run([python, "-c", source, "json", "--import"], capture_output=True, text=True,
                          check=True, cwd=tmp_path)
    (line,) = [x for x in done.stdout.splitlines() if x.startswith(probe.MARKER)]
    facts = json.loads(line[len(probe.MARKER):])
    assert facts["python_version"].startswith(version)
    assert facts["spec"]["origin"].endswith("json/__init__.py")
    assert facts["import"] == {"file": facts["spec"]["origin"], "error": None}
    assert str(tmp_path) not in facts["sys_path"] and "" not in facts["sys_path"]


def test_failed_import_is_one_line_and_stdout_of_the_package_is_kept_out(tmp_path):
    pkg = tmp_path / "noisy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("print('hello from import')\nimport not_installed_module_xyz\n")
    source = Path(probe.__file__).read_text()
    done = subprocess.run([sys.executable, "-c", source, "noisy", "--import"], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(tmp_path)})
    facts = json.loads(done.stdout.strip().split(probe.MARKER)[-1])
    assert facts["import"] == {"file": None,
                               "error": "ModuleNotFoundError: No module named 'not_installed_module_xyz'"}
    assert facts["pythonpath"] == [str(tmp_path)]
    assert facts["copies"] == [{"entry": str(tmp_path), "path": str(pkg)}]
    assert "hello from import" in done.stderr

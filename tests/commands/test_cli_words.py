"""What the commands say about where they looked: verify names the target it found nothing for, status
points at the other recorded targets, and the history keeps a command line that runs from anywhere."""

from __future__ import annotations

import json
import shlex

from fixtures.trees import one_file_target
from vllm_hotfix.flow.history_line import PATH_OPTIONS, absolute_value, command_line


def test_verify_with_nothing_recorded_names_the_target_it_looked_at(tmp_path, run_hotfix):
    root, _ = one_file_target(tmp_path)
    done = run_hotfix("verify", "--root", root)
    assert done.returncode == 1
    assert f'none is recorded for "{root}"' in done.stderr
    assert "this target" not in done.stderr


def test_status_points_at_the_other_recorded_targets(tmp_path, run_hotfix):
    root, patch = one_file_target(tmp_path)
    assert run_hotfix("apply", "--patch", patch, "--root", root).returncode == 0
    other = tmp_path / "other"
    (other / "pkg").mkdir(parents=True)
    (other / "pkg" / "m.py").write_text("a\n")
    done = run_hotfix("status", "--root", other)
    assert "1 other target(s) recorded in" in done.stderr and "`hotfix status --all`" in done.stderr
    same = run_hotfix("status", "--root", root)  # the only recorded target: nothing else to point at
    assert same.returncode == 0, same.stderr
    assert "status --all" not in same.stderr
    (other / "m.diff").write_text("--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert run_hotfix("apply", "--patch", other / "m.diff", "--root", other).returncode == 0
    for command in ("status", "verify"):  # issue 45: a target with its own record gets no line about the others
        done = run_hotfix(command, "--root", root)
        assert done.returncode == 0 and "other target(s)" not in done.stderr, done.stderr


def test_the_history_records_relative_paths_absolute(tmp_path, run_hotfix):
    root, patch = one_file_target(tmp_path)
    done = run_hotfix("apply", "--patch", "m.diff", "--root=root", "--id", "fix", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ((entry,),) = [t["entries"] for t in json.loads(run_hotfix("log", "--root", root, "--json").stdout)]
    assert shlex.split(entry["command"]) == ["hotfix", "apply", "--patch", str(patch), f"--root={root}", "--id", "fix"]


def test_command_line_makes_every_path_option_absolute_and_leaves_the_rest():
    argv = ["/usr/bin/hotfix", "apply", "my-fix", "--catalog", "./cat", "--python", "python3", "--checkout",
            "vllm=../vllm", "--patch-file=p/x.patch", "--id", "rel/name", "--root", "/abs/dir"]
    assert shlex.split(command_line(argv, cwd="/work/here")) == [
        "hotfix", "apply", "my-fix", "--catalog", "/work/here/cat", "--python", "python3", "--checkout",
        "vllm=/work/vllm", "--patch-file=/work/here/p/x.patch", "--id", "rel/name", "--root", "/abs/dir"]
    assert absolute_value("--python", ".venv/bin/python", "/w") == "/w/.venv/bin/python"


def test_a_venv_directory_given_as_python_is_made_absolute_and_a_command_name_is_not(tmp_path):
    (tmp_path / "venv").mkdir()
    assert absolute_value("--python", "venv", str(tmp_path)) == str(tmp_path / "venv")
    assert absolute_value("--python", "python3", str(tmp_path)) == "python3"
    assert {"--catalog", "--root", "--patch", "--lock"} <= PATH_OPTIONS

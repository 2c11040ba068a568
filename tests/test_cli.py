"""The command line's contract: one `hotfix: error:` line (JSON with --json) for every failure,
including click's usage errors; --json on every command; --dry-run on every command that writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vllm_hotfix.cli import cli

REPO = Path(__file__).resolve().parent.parent


def test_every_command_takes_json():
    commands = [(name, command) for name, command in cli.commands.items() if not hasattr(command, "commands")]
    commands += [(f"{name} {sub}", c) for name, group in cli.commands.items() for sub, c in getattr(group, "commands", {}).items()]
    without = [name for name, command in commands if "as_json" not in {p.name for p in command.params}]
    assert without == []


@pytest.mark.parametrize("name", ["apply", "rollback", "recover", "export", "new", "compose", "gc", "sign"])
def test_commands_that_write_take_dry_run(name):
    assert "dry_run" in {p.name for p in cli.commands[name].params}


@pytest.mark.parametrize("args, where", [
    (["apply", "--bogus"], "hotfix apply"),
    (["no-such-command"], "hotfix"),
    (["rollback"], "hotfix rollback"),
    (["guard", "--print-env", "--format", "yaml"], "hotfix guard"),
])
def test_usage_errors_are_one_line_and_json(run_hotfix, args, where):
    plain = run_hotfix(*args)
    assert plain.returncode == 2 and plain.stdout == ""
    lines = plain.stderr.splitlines()
    assert lines[0].startswith("hotfix: error: ") and "Usage:" not in plain.stderr, plain.stderr
    assert lines[1:] == [f"hotfix: hint: `{where} --help` lists the arguments and options"]
    as_json = run_hotfix(*args, "--json")
    assert as_json.returncode == 2
    error = json.loads(as_json.stdout)["error"]
    assert (error["kind"], error["exit_code"]) == ("UsageError", 2) and error["message"] in lines[0]


def test_guard_json(run_hotfix):
    done = run_hotfix("guard", "--print-env", "--require", "mamba-align-block-size", "--format", "shell", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["env"] == {"HOTFIX_REQUIRE": "mamba-align-block-size", "HOTFIX_STRICT": "1"}
    assert doc["lines"] == ["export HOTFIX_REQUIRE=mamba-align-block-size", "export HOTFIX_STRICT=1"]


def test_exit_codes_for_signals_are_documented(run_hotfix):
    assert "130/143 interrupted by SIGINT/SIGTERM" in run_hotfix("--help").stdout
    readme = (REPO / "README.md").read_text()
    assert "| 130 |" in readme and "| 143 |" in readme


@pytest.mark.slow
@pytest.mark.real
def test_try_it_prints_no_escape_codes_off_a_terminal(tmp_path, vllm_wheel):
    vllm_wheel("0.30.0")  # cached: try-it finds it and downloads nothing
    if shutil.which("hotfix") is None:
        pytest.skip("`hotfix` is not on PATH")
    for extra in ({}, {"NO_COLOR": "1"}):
        env = {**os.environ, "HOTFIX_TRY_DIR": str(tmp_path / f"try{len(extra)}"), **extra}
        done = subprocess.run([str(REPO / "scripts" / "try-it")], env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "\x1b" not in done.stdout + done.stderr
        assert "\n$ hotfix apply mamba-align-block-size" in done.stdout


def test_new_dry_run_writes_nothing(run_hotfix, tmp_path):
    from fixtures.ascend import make_upstream_clone

    clone = make_upstream_clone(tmp_path / "vllm-ascend")
    out = tmp_path / "catalog"
    done = run_hotfix("new", "glm-null-slot", "--from-commit", "HEAD", "--repo", clone, "--exclude", "release_notes/**",
                      "--target", "vllm-ascend", "--versions", "==0.30.0rc2", "--out", out, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"would write {out / 'manifests' / 'glm-null-slot.toml'}"
    assert done.stdout.splitlines()[-1] == "dry run: nothing was written" and not out.exists()
    as_json = run_hotfix("new", "glm-null-slot", "--from-commit", "HEAD", "--repo", clone, "--exclude",
                         "release_notes/**", "--target", "vllm-ascend", "--versions", "==0.30.0rc2", "--out", out,
                         "--dry-run", "--json")
    assert json.loads(as_json.stdout)["dry_run"] is True and not out.exists()


def test_main_called_with_argv_leaves_the_signal_mask_alone():
    """Only the process's entry point holds SIGINT/SIGTERM to the end: called in-process with argv, the mask
    stays as it was (a blocked mask leaked into a test worker, and every http.server it started next ignored
    its SIGTERM: the suite's TimeoutExpired, 2026-12-07)."""
    import signal

    from vllm_hotfix.cli import main

    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with pytest.raises(SystemExit):
        main(["list"])
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before

"""Issue 21, exit codes: hostile or odd input is a documented code, never 70, and a broken stdout loses
the message, not the outcome. Real CLI in subprocesses; every case also checks what changed on disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.trees import everything as tree, one_file_target

DEEP = 100_000  # far past the interpreter's recursion limit



@pytest.fixture
def target(tmp_path) -> tuple[Path, Path]:
    return one_file_target(tmp_path)


def one_error(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("hotfix: error: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0][len("hotfix: error: "):]


# ---- exit 8: input a parser cannot take ------------------------------------------------------------

def _catalog(tmp_path: Path, manifest: str) -> Path:
    catalog = tmp_path / "catalog"
    (catalog / "manifests").mkdir(parents=True)
    (catalog / "patches").mkdir()
    (catalog / "manifests" / "evil.toml").write_text(manifest)
    return catalog


@pytest.mark.parametrize("manifest, why", [
    ("schema = 1\nid = \"evil\"\nversion = 1\nx = " + "[" * DEEP + "]" * DEEP + "\n", "nested too deeply"),
    ("schema = 1\nid = \"evil\"\nversion = " + "1" * 5000 + "\n", "4300 digits"),
])
def test_a_manifest_no_parser_can_take_is_exit_8(tmp_path, run_hotfix, manifest, why):
    catalog = _catalog(tmp_path, manifest)
    before = tree(tmp_path)
    for command in (("list",), ("show", "evil")):
        done = run_hotfix(*command, "--catalog", catalog)
        assert done.returncode == 8, done.stderr
        message = one_error(done)
        assert message.startswith(str(catalog / "manifests" / "evil.toml")) and why in message
    assert tree(tmp_path) == before


def test_a_manifest_over_the_size_cap_is_refused_before_it_is_parsed(tmp_path, run_hotfix):
    catalog = _catalog(tmp_path, "schema = 1\n" + "# padding\n" * 200_000)  # 2 MB
    done = run_hotfix("list", "--catalog", catalog)
    assert done.returncode == 8
    assert one_error(done) == f"{catalog / 'manifests' / 'evil.toml'}: manifest is 1.9 MiB, over the 1.0 MiB a manifest may be"


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(tmp_path, run_hotfix):
    catalog = _catalog(tmp_path, "")
    (catalog / "manifests" / "evil.toml").unlink()
    os.mkfifo(catalog / "manifests" / "evil.toml")
    done = run_hotfix("list", "--catalog", catalog)
    assert done.returncode == 8 and "not a regular file" in one_error(done)


@pytest.mark.parametrize("lock, why", [
    (b"[" * DEEP + b"]" * DEEP, "nested too deeply"),
    (b'{"schema": ' + b"1" * 5000 + b', "hotfixes": []}', "4300 digits"),
])
def test_a_lock_no_parser_can_take_is_exit_8(tmp_path, run_hotfix, lock, why):
    path = tmp_path / "hotfix.lock"
    path.write_bytes(lock)
    before = tree(tmp_path)
    done = run_hotfix("verify", "--lock", path)
    assert done.returncode == 8, done.stderr
    assert one_error(done).startswith(f"{path}: ") and why in one_error(done)
    assert tree(tmp_path) == before


def test_a_record_no_parser_can_take_is_exit_8_and_nothing_is_written(tmp_path, run_hotfix, target, _isolated_state):
    root, patch = target
    assert run_hotfix("apply", "--patch", patch, "--root", root).returncode == 0
    from vllm_hotfix_guard import paths

    state = paths.TargetDir.of(root).state_file
    state.write_bytes(b"[" * DEEP + b"]" * DEEP)
    before, state_before = tree(root), tree(_isolated_state)
    for command in (("status", "--root", root), ("rollback", "m", "--root", root)):
        done = run_hotfix(*command)
        assert done.returncode == 8, (command, done.stderr)
        assert one_error(done) == f"{state}: nested too deeply to read"  # the one reader of records says so
    assert tree(root) == before and tree(_isolated_state) == state_before


def test_a_nul_byte_in_the_lock_path_is_exit_8():
    """No shell can pass a NUL in argv or the environment; an embedding caller (or a test) can."""
    code = ("import sys\nfrom vllm_hotfix.cli import main\n"
            "try:\n    main(['verify', '--lock', 'a\\x00b'])\nexcept SystemExit as e:\n    sys.exit(e.code)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 8, done.stderr
    assert "holds a NUL byte" in one_error(done)
    code = code.replace("['verify', '--lock', 'a\\x00b']", "['list', '--catalog', 'a\\x00b']")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 8 and "NUL byte" in one_error(done), done.stderr


# ---- exit 2: what the command line names cannot be used ----------------------------------------------

def test_doctor_on_a_closed_stdin_is_a_usage_error(run_hotfix):
    done = subprocess.run([sys.executable, "-m", "vllm_hotfix", "doctor", "-"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, preexec_fn=lambda: os.close(0))
    assert done.returncode == 2, done.stderr
    assert one_error(done) == "-: standard input is closed, there is no log to read"


@pytest.mark.parametrize("kind", ["not executable", "a directory", "exec format error", "no such file"])
def test_a_python_that_cannot_be_executed_is_one_line_exit_2(tmp_path, run_hotfix, kind):
    python = tmp_path / "python"
    if kind == "not executable":
        python.write_text("#!/bin/sh\n")
    elif kind == "a directory":
        python.mkdir()
    elif kind == "exec format error":
        python.write_bytes(b"\x7fELF garbage\0\1\2")
        python.chmod(0o755)
    before = tree(tmp_path)
    for command in (("where", "vllm"), ("status",), ("apply", "mamba-align-block-size", "--dry-run"),
                    ("apply", "mamba-align-block-size"), ("rollback", "mamba-align-block-size")):
        done = run_hotfix(*command, "--python", python)
        assert done.returncode == 2, (command, done.stderr)
        assert one_error(done).startswith(f"--python {python}: "), done.stderr
    assert tree(tmp_path) == before


# ---- the locale does not decide whether a path works -------------------------------------------------

def test_a_non_ascii_target_under_the_c_locale(tmp_path, run_hotfix, target):
    root, patch = target
    odd = root.parent / "caf\u00e9"
    root.rename(odd)
    env = {"LC_ALL": "C", "PYTHONUTF8": "0", "LANG": ""}
    assert run_hotfix("apply", "--patch", patch, "--root", odd, env=env).returncode == 0
    assert (odd / "pkg" / "m.py").read_bytes() == b"b\n"
    status = run_hotfix("status", "--root", odd, env=env)
    assert status.returncode == 0 and " applied " in status.stdout
    assert run_hotfix("status", "--root", odd).returncode == 0  # the same record from a UTF-8 locale
    assert run_hotfix("rollback", "m", "--root", odd, env=env).returncode == 0
    assert (odd / "pkg" / "m.py").read_bytes() == b"a\n"


# ---- a broken stdout loses the message, not the outcome ---------------------------------------------

def _run_with_stdout(args, stdout) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def _closed_stdout(args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vllm_hotfix", *map(str, args)], stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: os.close(1))


def _abandoned_pipe(args) -> subprocess.CompletedProcess:
    """`| head -0` without the race: the reader is gone before the command starts (EPIPE on every write)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return _run_with_stdout(args, write)
    finally:
        os.close(write)


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["closed", "full", "abandoned pipe"])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_broken_stdout_after_a_committed_apply_and_rollback_is_exit_0(target, broken, as_json):
    root, patch = target
    json_flag = ["--json"] if as_json else []

    def run(*args):
        if broken == "closed":
            return _closed_stdout(args)
        if broken == "full":
            with open("/dev/full", "w") as full:
                return _run_with_stdout(args, full)
        return _abandoned_pipe(args)

    applied = run("apply", "--patch", patch, "--root", root, *json_flag)
    assert applied.returncode == 0, applied.stderr
    assert "error" not in applied.stderr
    assert (root / "pkg" / "m.py").read_bytes() == b"b\n"
    status = subprocess.run([sys.executable, "-m", "vllm_hotfix", "status", "--root", root, "--json"],
                            capture_output=True, text=True)
    assert [s["state"] for s in json.loads(status.stdout)] == ["applied"]  # recorded
    rolled = run("rollback", "m", "--root", root, *json_flag)
    assert rolled.returncode == 0, rolled.stderr
    assert (root / "pkg" / "m.py").read_bytes() == b"a\n"
    verify = run("verify", "--root", root)
    assert verify.returncode == 1  # still the verdict's code (nothing recorded to verify), whatever stdout is


def test_a_failed_command_keeps_its_code_when_stderr_is_full_too(target):
    root, _ = target
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "vllm_hotfix", "apply", "--patch", root / "absent.diff",
                               "--root", root], stdout=full, stderr=full)
    assert done.returncode == 2


# ---- the state directory never depends on the current directory ------------------------------------

def test_a_relative_state_dir_is_taken_against_the_current_directory_once(tmp_path, target):
    root, patch = target
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    env = {**os.environ, "HOTFIX_STATE_DIR": "state"}
    done = subprocess.run([sys.executable, "-m", "vllm_hotfix", "apply", "--patch", patch, "--root", root],
                          cwd=here, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    records = list((here / "state" / "targets").glob("*/state.json"))
    assert len(records) == 1 and not (elsewhere / "state").exists()
    recorded = json.loads(records[0].read_text())
    assert Path(recorded["target"]["root"]).is_absolute()
    assert all(not Path(p).is_absolute() and ".." not in p for h in recorded["series"] for p in h["patches"])
    same = subprocess.run([sys.executable, "-m", "vllm_hotfix", "status", "--root", root, "--json"], cwd=elsewhere,
                          env={**os.environ, "HOTFIX_STATE_DIR": str(here / "state")}, capture_output=True, text=True)
    assert [s["state"] for s in json.loads(same.stdout)] == ["applied"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.access("/usr/bin/python3", os.X_OK),
                    reason="needs root, setpriv and a system python to run hotfix as another user")
def test_a_python_another_user_cannot_reach_is_one_line_exit_2(tmp_path):
    """`status --python` with an interpreter behind a folder this user may not search was exit 70 (issue 31):
    run as another user (nobody), when this machine lets that user import this vllm-hotfix at all."""
    locked = tmp_path / "locked"
    locked.mkdir()
    shutil.copy("/usr/bin/python3", locked / "python")
    locked.chmod(0o700)
    tmp_path.chmod(0o755)
    import vllm_hotfix
    import click

    path = os.pathsep.join([str(Path(vllm_hotfix.__file__).parent.parent), str(Path(click.__file__).parent.parent)])
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                            "import vllm_hotfix.cli"], env={"PYTHONPATH": path}, capture_output=True)
    if probe.returncode != 0:
        pytest.skip("the other user cannot import this vllm-hotfix (its folders are not readable to it)")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-m", "vllm_hotfix"]
    env = {"PYTHONPATH": path, "HOME": "/", "PATH": "/usr/bin:/bin", "HOTFIX_STATE_DIR": "/nonexistent/hotfix-state"}
    for command in (("status",), ("where", "vllm"), ("verify",), ("apply", "mamba-align-block-size", "--dry-run")):
        done = subprocess.run([*nobody, *command, "--python", str(locked / "python")], env=env, capture_output=True,
                              text=True)
        assert done.returncode == 2, (command, done.stderr)
        assert "cannot reach it (permission denied on the way)" in one_error(done), done.stderr
    env["HOTFIX_STATE_DIR"] = str(locked / "state")  # a state directory behind that folder: exit 6, one line
    done = subprocess.run([*nobody, "status", "--all"], env=env, capture_output=True, text=True)
    assert done.returncode == 6 and "cannot be looked at by this user" in one_error(done), done.stderr

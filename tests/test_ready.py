"""Readiness records (vllm_hotfix_guard/ready.py) and the `ready` probe (vllm_hotfix_guard/expected.py): real
processes record their verdicts; the directory is hostile input. The real vLLM run is tests/test_ready_vllm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vllm_hotfix_guard import expected, ready, ready_probe

RECORDER = r"""
import sys
from vllm_hotfix_guard import ready
class V:  # a failing verdict (guard/verdicts.Verdict's two fields read)
    def __init__(self, i): self.hotfix_id, self.in_effect = i, False
ready.record([V(i) for i in sys.argv[2:]], role=sys.argv[1])
print("recorded", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def ready_dir(tmp_path, monkeypatch):
    where = tmp_path / "ready"
    where.mkdir(mode=0o700)
    where.chmod(0o700)
    monkeypatch.setenv("HOTFIX_READY_DIR", str(where))
    monkeypatch.delenv("HOTFIX_LOCK", raising=False)
    return where


@pytest.fixture
def processes(ready_dir):
    started = []

    def start(role: str, *failing: str, parent: subprocess.Popen | None = None):
        proc = subprocess.Popen([sys.executable, "-c", RECORDER, role, *failing], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        assert proc.stdout.readline() == "recorded\n", proc.stderr.read()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stdin.close()
        proc.wait(timeout=30)


def probe(*argv: str, env=None) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-c", "import sys; from vllm_hotfix_guard import ready_probe; "
                           "sys.exit(ready_probe.main(sys.argv[1:]))", *argv],
                          capture_output=True, text=True, env=env or dict(os.environ), timeout=60)
    return done.returncode, done.stdout, done.stderr


def test_ready_goes_from_missing_to_ready_to_failing_and_ignores_dead_pids(processes, ready_dir):
    spec = "api=1,engine=1,worker=2"
    processes("main (vllm serve)")
    engine = processes("EngineCore")
    code, out, _ = probe("--expect", spec)
    assert code == 1
    assert out.splitlines() == ['worker "VllmWorker-0" of "EngineCore" pid %d: no record in effect' % engine.pid,
                                'worker "VllmWorker-1" of "EngineCore" pid %d: no record in effect' % engine.pid]
    workers = [processes("VllmWorker-0"), processes("VllmWorker-1")]
    code, out, _ = probe("--expect", spec)
    # the workers here are children of the test, not of the engine core: counted, not named by engine
    assert (code, out) == (0, "ready: api=1,engine=1,worker=2 (--expect), all in effect\n")
    workers[1].stdin.close()
    workers[1].wait(timeout=30)  # its record stays; its pid is gone
    restarted = processes("VllmWorker-1", "mamba-align-block-size")
    code, out, _ = probe("--expect", spec, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["ready"] is False and report["in_effect"] == {"api": 1, "engine": 1, "worker": 1}
    assert report["problems"] == [
        f'worker "VllmWorker-1" pid {restarted.pid}: NOT IN EFFECT: "mamba-align-block-size"',
        "workers: 1 of 2 recorded in effect"]  # not children of the engine core here: counted, not named
    assert len(list((ready_dir).iterdir())) == 5  # one file per process, the dead one's included


def test_a_recycled_pid_does_not_count(processes, ready_dir):
    proc = processes("EngineCore")
    name = ready_dir / f"{proc.pid}.ready"
    text = name.read_text()
    start = ready.start_time(proc.pid)
    name.write_text(text.replace(f"start {start}\n", f"start {start - 1}\n"))  # an earlier process of that pid
    assert probe("--expect", "engine=1")[:2] == (1, 'engine core "EngineCore": no record in effect\n')


def test_a_shared_world_writable_mount_gets_our_own_private_subdirectory(tmp_path, monkeypatch):
    shared = tmp_path / "emptydir"
    shared.mkdir()
    shared.chmod(0o1777)  # a tmpfs; an emptyDir is 0777
    monkeypatch.setenv("HOTFIX_READY_DIR", str(shared))
    ready.record([], role="EngineCore")
    (sub,) = shared.iterdir()
    assert sub.name == f"vllm-hotfix-{os.geteuid()}" and sub.stat().st_mode & 0o777 == 0o700
    assert [p.name for p in sub.iterdir()] == [f"{os.getpid()}.ready"]
    sub.chmod(0o777)  # someone opened it up: nothing in it counts, the probe fails
    code, out, _ = probe("--expect", "engine=1")
    assert code == 1 and out.startswith(f'directory: "{sub}": not ours alone (owner {os.geteuid()}, mode 777)')


def hostile(where, kind: str) -> str:
    name = "4242.ready"
    if kind == "symlink":
        (where.parent / "target").write_text(ready.Record(4242, 1, 1, "engine", "EngineCore", (0, 0, None, None),
                                                          "", True, ()).text())
        os.symlink(where.parent / "target", where / name)
    elif kind == "fifo":
        os.mkfifo(where / name)
    elif kind == "large":
        (where / name).write_bytes(b"x" * (ready.RECORD_LIMIT + 1))
    elif kind == "fields":
        (where / name).write_text(f"{ready.FORMAT}\npid 4242\nstart 1\n")
    elif kind == "name":
        (where / "junk.txt").write_text("x")
        name = "junk.txt"
    elif kind == "effect":  # "yes" with failing ids
        record = ready.Record(4242, 1, 1, "engine", "EngineCore", (0, 0, None, None), "", True, ("x",))
        (where / name).write_text(record.text())
    return name


@pytest.mark.parametrize("kind", ["symlink", "fifo", "large", "fields", "name", "effect"])
def test_a_hostile_record_is_one_line_never_a_hang_or_a_pass(processes, ready_dir, kind):
    processes("EngineCore")
    name = hostile(ready_dir, kind)
    code, out, _ = probe("--expect", "engine=1")
    assert code == 1
    (line,) = out.splitlines()
    assert line.startswith(f'record "{name}": '), line
    print(line)


def test_a_symlinked_directory_is_refused_and_the_guard_writes_nothing_through_it(tmp_path, monkeypatch, caplog):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, tmp_path / "link")
    monkeypatch.setenv("HOTFIX_READY_DIR", str(tmp_path / "link"))
    monkeypatch.setattr(ready, "_warned", False)
    ready.record([], role="EngineCore")  # never raises: one warning
    assert list(real.iterdir()) == []
    assert f'readiness not recorded: HOTFIX_READY_DIR "{tmp_path / "link"}": a symlink' in caplog.text
    assert probe("--expect", "engine=1")[:2] == (1, f'directory: HOTFIX_READY_DIR "{tmp_path / "link"}": '
                                                   f'a symlink (not followed)\n')


def test_the_lock_digest_is_the_sha256_of_the_lock_bytes(ready_dir, tmp_path, monkeypatch):
    import hashlib

    lock = tmp_path / "hotfix.lock"
    lock.write_bytes(b'{"schema": 1}')
    monkeypatch.setenv("HOTFIX_LOCK", str(lock))
    ready.record([], role="VllmWorker-3")
    record = ready_probe.parse(f"{os.getpid()}.ready", (ready_dir / f"{os.getpid()}.ready").read_bytes())
    assert record.lock == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert (record.kind, record.rank, record.in_effect, record.failing) == ("worker", 3, True, ())


@pytest.mark.parametrize("role, kind, ranks", [
    ("main (vllm serve)", "main", (None, None, None, None)),
    ("ApiServer_2", "api", (2, None, None, None)),
    ("EngineCore", "engine", (0, 0, None, None)),
    ("EngineCore_DP3", "engine", (3, 3, None, None)),
    ("VllmWorker-7", "worker", (7, None, None, None)),
    ("Worker_DP1_PP1_TP2", "worker", (None, 1, 2, 1)),
    ("Worker_TP1", "worker", (1, None, 1, 0)),
    ("fork of EngineCore", "other", (None, None, None, None)),
])
def test_roles_are_vllms_process_names(role, kind, ranks):
    assert ready.classify(role) == (kind, ranks)


@pytest.mark.parametrize("argv, counts", [
    (["vllm", "serve", "m"], (1, 1, 0)),
    (["vllm", "serve", "m", "--tensor-parallel-size", "4", "-pp=2"], (1, 1, 8)),
    (["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m", "-tp", "2", "--data-parallel-size=2"], (2, 2, 4)),
    (["vllm", "serve", "m", "--data_parallel_size", "4", "--api-server-count", "1"], (1, 4, 0)),
    (["vllm", "serve", "m", "-dp", "4", "-dpl", "2", "-dpr", "2", "-tp", "2"], (2, 2, 4)),
    (["vllm", "serve", "m", "-dp", "4", "--data-parallel-rank", "1"], (1, 1, 0)),
    (["vllm", "serve", "m", "-dp", "2", "--headless", "-tp", "2"], (0, 2, 4)),
    (["sh", "-c", "exec vllm serve m --tensor-parallel-size 2"], (1, 1, 2)),
    # vLLM's argparse takes a unique prefix of a long option (issue 43: read as 0 workers before)
    (["vllm", "serve", "m", "--tensor-parallel", "2"], (1, 1, 2)),
    (["vllm", "serve", "m", "--tensor-parallel=2", "--pipeline", "2"], (1, 1, 4)),
    (["vllm", "serve", "m", "--tensor_parallel", "2", "--data-parallel-size-l", "2", "-dp", "4", "--data-parallel-st",
      "2"], (2, 2, 4)),
])
def test_the_expected_set_is_what_vllm_serve_starts(argv, counts):
    found = expected.from_argv(argv, "test")
    assert (found.api, found.engine, found.worker) == counts


@pytest.mark.parametrize("argv", [["vllm", "serve", "m", "--config", "c.yaml"], ["python", "app.py"],
                                  ["vllm", "serve", "m", "--distributed-executor-backend", "ray", "-tp", "2"],
                                  ["vllm", "serve", "m", "-tp", "x"],
                                  ["vllm", "serve", "m", "--conf", "c.yaml"],  # --config, abbreviated
                                  ["vllm", "serve", "m", "--distributed-executor", "ray"],
                                  ["vllm", "serve", "m", "--data-parallel", "2", "-tp", "2"]])  # several: cannot tell
def test_what_the_command_line_cannot_tell_asks_for_expect(argv):
    with pytest.raises(expected.Usage):
        expected.from_argv(argv, "test")


def test_usage_errors_exit_2(ready_dir, monkeypatch):
    for argv in (["--expect", "gpu=1"], ["--expect"], ["--expect", "worker=-1"], ["--pid", "0"], ["--what"]):
        code, out, err = probe(*argv)
        assert (code, out) == (2, ""), argv
        assert err.startswith("ready: ") and len(err.splitlines()) == 1
    env = {k: v for k, v in os.environ.items() if k != "HOTFIX_READY_DIR"}
    assert probe("--expect", "api=1", env=env)[0] == 2


def test_the_probe_imports_nothing_but_itself(ready_dir):
    script = ("import sys; before = set(sys.modules); from vllm_hotfix_guard import ready_probe; ready_probe.main(['--expect', "
              "'api=1']); print(sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    added = eval(done.stdout.splitlines()[-1])
    assert [m for m in added if not m.startswith("vllm_hotfix")] == ["__future__"], added
    assert sorted(m for m in added if m.startswith("vllm_hotfix_guard.")) == [
        "vllm_hotfix_guard.expected", "vllm_hotfix_guard.ready", "vllm_hotfix_guard.ready_io",
        "vllm_hotfix_guard.ready_probe", "vllm_hotfix_guard.settings"]


@pytest.mark.parametrize("how", ["matching", "another", "no lock", "bad lock"])
def test_the_mounted_lock_must_be_the_one_the_pod_was_admitted_with(processes, ready_dir, tmp_path, how):
    """HOTFIX_EXPECT_FINGERPRINT (k8s: the pod's fingerprint annotation, by the downward API): `ready` is ready
    only when HOTFIX_LOCK's fingerprint is that one; otherwise exit 1 and one quoted line. Run as the guard's own
    distribution (`python -m vllm_hotfix_guard ready` from the exported tree): stdlib only, its closure enough."""
    from fixtures.kube import make_export
    from vllm_hotfix_guard.txn.hotfix_lock import load_lock
    from vllm_hotfix_guard.txn.lock_check import expected_fingerprint

    export = make_export(tmp_path / "export")
    lock = export / "hotfix.lock"
    fingerprint = expected_fingerprint(load_lock(lock))
    processes("main (vllm serve)")
    env = {**os.environ, "HOTFIX_LOCK": str(lock), "HOTFIX_EXPECT_FINGERPRINT": fingerprint,
           "PYTHONPATH": str(export / "guard" / "site-packages")}
    if how == "another":
        env["HOTFIX_EXPECT_FINGERPRINT"] = "f" * 16
    elif how == "no lock":
        env["HOTFIX_LOCK"] = str(tmp_path / "gone.lock")
    elif how == "bad lock":
        (tmp_path / "bad.lock").write_text('{"schema": 1, "hotfixes": "\x1b[31m"}')
        env["HOTFIX_LOCK"] = str(tmp_path / "bad.lock")
    done = subprocess.run([sys.executable, "-m", "vllm_hotfix_guard", "ready", "--expect", "api=1"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=60)
    if how == "matching":
        assert done.returncode == 0 and done.stdout.endswith("all in effect\n"), done.stdout + done.stderr
        return
    assert done.returncode == 1 and len(done.stdout.splitlines()) == 1, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith(f'fingerprint: the pod expects "{env["HOTFIX_EXPECT_FINGERPRINT"]}"')
    assert line.isascii() and line.isprintable() and "\x1b" not in line
    words = {"another": f'has fingerprint "{fingerprint}"', "no lock": "is missing", "bad lock": "cannot be read"}
    assert words[how] in line


def test_the_generated_probe_never_runs_a_guard_planted_in_the_working_directory(processes, ready_dir, tmp_path):
    """The probe as `k8s` / `compose` generate it (`python3 -I -m vllm_hotfix_guard ready`): a vllm_hotfix_guard/
    in the container's working directory, or PYTHONPATH naming one, would otherwise answer "ready"."""
    from vllm_hotfix.containers.readiness import probe_command

    planted = tmp_path / "workdir" / "vllm_hotfix_guard"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    (planted / "__main__.py").write_text("print('ready: planted'); raise SystemExit(0)\n")
    processes("main (vllm serve)", "mamba-align-block-size")  # recorded NOT in effect: not ready
    command = probe_command(sys.executable)
    assert command[1:] == ["-I", "-m", "vllm_hotfix_guard", "ready"]
    for env in (dict(os.environ), {**os.environ, "PYTHONPATH": str(planted.parent)}):
        done = subprocess.run([*command, "--expect", "api=1"], cwd=planted.parent, capture_output=True, text=True,
                              env=env, timeout=60)
        assert done.returncode == 1 and "planted" not in done.stdout, done.stdout + done.stderr
    bare = subprocess.run([sys.executable, "-m", "vllm_hotfix_guard", "ready"], cwd=planted.parent, capture_output=True,
                          text=True, timeout=60)
    assert bare.stdout == "ready: planted\n"  # what -I prevents

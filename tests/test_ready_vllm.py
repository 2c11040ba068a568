"""`ready` under the real vLLM 0.30.0 loader (issue 33's Done-when): a main process, an engine core
spawned from it, and two workers started by the engine core (one forked, one spawned), each checked by
the guard through vLLM's own ``load_general_plugins()`` and recording its verdict in HOTFIX_READY_DIR.
`ready` says 1 while the workers are not up, 0 once they all recorded "in effect", and 1 again (naming
the worker) after the patched file was reverted and that worker restarted.

Nothing here writes into the cached venv (tests/fixtures/vllmfull.py: a patched symlink farm on PYTHONPATH).
"""

from __future__ import annotations

import subprocess

import pytest

from fixtures.vllmfull import HOTFIX, MAMBA, guard_setup, run

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full]

SERVE = r'''
import multiprocessing as mp, os, sys, time
from vllm.plugins import load_general_plugins


def worker():
    load_general_plugins()  # a no-op in a forked worker (vLLM's plugins_loaded): the guard's fork hook checked it
    time.sleep(3600)


def start(rank, method):
    proc = mp.get_context(method).Process(name=f"VllmWorker-{rank}", target=worker, daemon=True)
    proc.start()
    return proc


def engine(commands, replies):
    load_general_plugins()
    workers = {}
    replies.send("up")
    for command in iter(commands.recv, "stop"):
        if command == "workers":
            workers = {0: start(0, "fork"), 1: start(1, "spawn")}
        elif command == "restart 0":
            workers[0].terminate()
            workers[0].join()
            workers[0] = start(0, "fork")
        time.sleep(0.2)
        while not all(os.path.exists(os.path.join(sys.argv[1], f"{p.pid}.ready")) for p in workers.values()):
            time.sleep(0.05)
        replies.send(" ".join(str(p.pid) for p in workers.values()))


def revert(path, data):
    with open(path + ".tmp", "wb") as fh:
        fh.write(data)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    load_general_plugins()
    here, engine_end = mp.Pipe()
    back, reply_end = mp.Pipe()
    core = mp.get_context("spawn").Process(name="EngineCore", target=engine, args=(engine_end, reply_end))
    core.start()
    print("engine", core.pid, back.recv(), flush=True)
    patched = open(os.environ["PATCHED"], "rb").read()
    try:
        for line in sys.stdin:
            command = line.strip()
            if command == "revert":
                revert(os.environ["PATCHED"], open(os.environ["PRISTINE"], "rb").read())
                print("reverted", flush=True)
                continue
            here.send(command)
            if command == "stop":
                break
            print("pids", back.recv(), flush=True)
    finally:
        revert(os.environ["PATCHED"], patched)
    core.join(timeout=60)
'''

PROBE = "import sys; from vllm_hotfix_guard import ready_probe; sys.exit(ready_probe.main(sys.argv[1:]))"
EXPECT = "api=1,engine=1,worker=2"


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return guard_setup(tmp_path_factory.mktemp("vllm-ready"))


def test_ready_goes_1_then_0_then_1_under_vllms_loader_with_forked_and_spawned_workers(full, tmp_path):
    where = tmp_path / "ready"
    where.mkdir(mode=0o700)
    (full["work"] / "serve.py").write_text(SERVE)
    env = dict(HOTFIX_LOCK=str(full["lock"]), HOTFIX_READY_DIR=str(where), PATCHED=str(full["patched"] / MAMBA),
               PRISTINE=str(full["pristine"]))

    def probe():
        done = run(full, [str(full["venv"].python), "-c", PROBE, "--expect", EXPECT], **env)
        print(f"ready -> {done.returncode}\n{done.stdout}{done.stderr}")
        return done.returncode, done.stdout.splitlines()

    server, seen = _start(full, env, tmp_path / "stderr"), []
    try:
        engine_pid = int(_read(server, "engine", seen).split()[1])
        code, lines = probe()  # main and engine core recorded; the workers are not up yet
        assert code == 1
        assert lines == [f'worker "VllmWorker-{r}" of "EngineCore" pid {engine_pid}: no record in effect' for r in (0, 1)]

        _send(server, "workers")
        forked, spawned = map(int, _read(server, "pids", seen).split()[1:])
        assert probe() == (0, [f"ready: {EXPECT} (--expect), all in effect"])

        _send(server, "revert")
        _read(server, "reverted", seen)
        _send(server, "restart 0")
        restarted, same = map(int, _read(server, "pids", seen).split()[1:])
        assert same == spawned and restarted != forked
        code, lines = probe()
        assert code == 1
        assert lines[0].startswith(f'worker "VllmWorker-0" pid {restarted}: NOT IN EFFECT: "{HOTFIX}"'), lines
        assert lines[1:] == [f'worker "VllmWorker-0" of "EngineCore" pid {engine_pid}: no record in effect']
        assert (where / f"{forked}.ready").exists()  # the killed worker's record is still there: a dead pid, ignored
        _send(server, "stop")
        out, _ = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    guard = [line for line in seen + out.splitlines() + (tmp_path / "stderr").read_text().splitlines()
             if "vllm-hotfix guard " in line]
    print("\n".join(guard))
    assert any(f"pid={restarted} role=VllmWorker-0 " in line and "NOT IN EFFECT" in line for line in guard), guard
    assert sum(" in effect" in line and "NOT IN EFFECT" not in line for line in guard) == 4, guard


def _start(full, env, stderr) -> subprocess.Popen:
    """serve.py running under run()'s environment (fixtures/vllmfull.py), stdin and stdout its commands and replies."""
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VLLM_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    base.update(VLLM_TARGET_DEVICE="cpu", HOTFIX_STATE_DIR=str(full["work"] / "state"),
                PYTHONPATH=os.pathsep.join(map(str, [full["hotfix"], full["patched"]])), **env)
    with open(stderr, "w") as err:
        return subprocess.Popen([str(full["venv"].python), str(full["work"] / "serve.py"), env["HOTFIX_READY_DIR"]],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=base,
                                cwd=full["work"])


def _send(server, command: str) -> None:
    server.stdin.write(command + "\n")
    server.stdin.flush()


def _read(server, prefix: str, seen: list) -> str:
    for line in server.stdout:
        seen.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"the server ended before {prefix!r}")

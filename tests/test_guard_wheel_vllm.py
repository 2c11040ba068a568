"""The BUILT guard wheel (what `hotfix guard --build-dist`, `export` and `bake` deliver), pip-installed into a venv
that has the real vLLM 0.30.0 with all its dependencies and no vllm_hotfix, under vLLM's own
``load_general_plugins()`` in every environment `compose`, `k8s` and `bake` generate (issue 43): the lock,
strict mode, the ready directory, the trust policy, the pod's expected fingerprint, and their combinations.
No exception ever escapes ``register()`` unless strict mode means to stop the process (a hotfix not in
effect: ``HotfixNotInEffect``), and `ready` (``python3 -I -m vllm_hotfix_guard ready``, the probe as
generated) goes 1 -> 0 -> 1 as the locked file is reverted, restored and reverted again.

The venv: a fresh one (``realdata.make_venv``) whose site-packages gets the guard by ``pip install`` of the wheel,
and a .pth that layers a patched symlink farm of vLLM and then the cached full venv's site-packages below it
(the cache itself is never written)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import realdata
from fixtures.codenames import code_of
from fixtures.vllmfull import HOTFIX, MAMBA, NEW, OLD, sha256

from vllm_hotfix.containers import guard_dist

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.vllm_full, pytest.mark.tools]  # tools: minisign

STOPPED = "vllm_hotfix_guard.HotfixNotInEffect"  # the one exception strict mode means to raise

LOADER = r'''
import json, os, sys, time
from vllm.plugins import load_general_plugins
try:
    load_general_plugins()
    raised = None
except BaseException as exc:  # what would escape into vLLM
    raised = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
mods = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0].startswith("vllm_hotfix")})
print(json.dumps({"pid": os.getpid(), "raised": raised, "hotfix_modules": mods,
                  "derived": "vllm_hotfix_guard.derive" in sys.modules}), flush=True)
if os.environ.get("STAY"):
    sys.stdin.read()  # alive until the test closes stdin: its readiness record counts
'''

# The matrix's processes: vLLM (torch) imported once, then one fork per environment, each calling vLLM's real
# load_general_plugins() with exactly that environment (a forked child of a parent that never loaded plugins
# loads them, as vLLM's own forked workers of a library parent would). 32 cold starts took ~17 min at load 9.
FORKS = r'''
import json, os, sys, tempfile
import vllm.plugins
for line in sys.stdin:
    env = json.loads(line)
    fd, out = tempfile.mkstemp()
    pid = os.fork()
    if pid == 0:
        os.environ.clear()
        os.environ.update(env)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            vllm.plugins.load_general_plugins()
            raised = None
        except BaseException as exc:  # what would escape into vLLM
            raised = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
        mods = sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0].startswith("vllm_hotfix")})
        sys.stdout.flush(); sys.stderr.flush()
        os.write(1, ("\n" + json.dumps({"pid": os.getpid(), "raised": raised, "hotfix_modules": mods}) + "\n").encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(fd)
    with open(out, encoding="utf-8", errors="replace") as f:
        text = f.read()
    os.unlink(out)
    print(json.dumps(text), flush=True)
'''


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    full = realdata.vllm_full_venv("0.30.0")
    work = tmp_path_factory.mktemp("guard-wheel-vllm")
    dist = guard_dist.current()
    wheel = work / dist.wheel_name
    wheel.write_bytes(guard_dist.wheel_bytes(dist))
    venv = realdata.make_venv(work / "venv")
    realdata.pip_install(venv, "--no-index", str(wheel))
    farm = work / "patched"
    farm.mkdir()
    subprocess.run(["cp", "-as", str(full.site_packages / "vllm"), str(farm / "vllm")], check=True)
    shutil.copytree(full.site_packages / "vllm-0.30.0.dist-info", farm / "vllm-0.30.0.dist-info")
    pristine = (full.site_packages / MAMBA).read_bytes()
    patched = pristine.replace(OLD, NEW)
    target = farm / MAMBA
    target.unlink()  # a symlink into the cache: replaced, never written through
    target.write_bytes(patched)
    (venv.site_packages / "zz_vllm_full.pth").write_text(
        f"{farm}\nimport site; site.addsitedir({str(full.site_packages)!r})\n")
    lock = work / "lock" / "hotfix.lock"
    lock.parent.mkdir()
    lock.write_text(json.dumps({
        "schema": 1, "generator": "test", "site_packages": str(farm), "version": 3,
        "hotfixes": [{"id": HOTFIX, "version": 1, "distribution": "vllm", "package": "vllm", "baseline_version": "0.30.0",
                      "fixed_in": None, "files": [{"path": MAMBA, "sha256": sha256(patched),
                                                   "baseline_sha256": sha256(pristine), "export": f"{HOTFIX}/{MAMBA}",
                                                   "code": code_of(MAMBA, pristine, patched, full.python)}]}]}))
    unsigned = work / "unsigned" / "hotfix.lock"
    unsigned.parent.mkdir()
    shutil.copyfile(lock, unsigned)
    key, pub = work / "keys" / "release.key", work / "keys" / "release.pub"
    key.parent.mkdir()
    done = subprocess.run(["minisign", "-G", "-W", "-f", "-p", pub, "-s", key], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"minisign -G failed: {done.stderr}")
    signed = subprocess.run([sys.executable, "-m", "vllm_hotfix", "sign", str(lock), "--key", str(key)],
                            capture_output=True, text=True)
    assert signed.returncode == 0, signed.stderr
    policy = work / "trust.toml"
    policy.write_text(f'threshold = 1\nmin_version = 2\n[[keys]]\nname = "release"\nminisign = "{pub.read_text().splitlines()[1]}"\n')
    fingerprint = subprocess.run([sys.executable, "-m", "vllm_hotfix", "verify", "--lock", str(lock), "--python",
                                  str(venv.python), "--json"], capture_output=True, text=True)
    assert fingerprint.returncode == 0, fingerprint.stdout + fingerprint.stderr
    (work / "loader.py").write_text(LOADER)
    (work / "forks.py").write_text(FORKS)
    return {"venv": venv, "work": work, "lock": lock, "unsigned": unsigned, "policy": policy, "target": target,
            "pristine": pristine, "patched": patched, "fingerprint": json.loads(fingerprint.stdout)[0]["fingerprint"]}


def _env(image, **env) -> dict:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("HOTFIX_", "VLLM_", "PYTHON")) and k not in ("VIRTUAL_ENV",)}
    base.update(VLLM_TARGET_DEVICE="cpu")
    base.update({k: str(v) for k, v in env.items()})
    return base


def _load(image, **env) -> tuple[dict, str]:
    done = subprocess.run([str(image["venv"].python), str(image["work"] / "loader.py")], capture_output=True, text=True,
                          env=_env(image, **env), cwd=image["work"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (report,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return report, done.stdout + done.stderr  # vLLM's logger writes to stdout, the fallback to stderr


class _Forks:
    """One forks.py server: ``load(**env)`` -> (report, output) of one forked process under ``env``."""

    def __init__(self, image):
        self.image = image
        self.proc = subprocess.Popen([str(image["venv"].python), str(image["work"] / "forks.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=_env(image), cwd=image["work"])

    def load(self, **env) -> tuple[dict, str]:
        self.proc.stdin.write(json.dumps(_env(self.image, **env)) + "\n")
        self.proc.stdin.flush()
        text = json.loads(self.proc.stdout.readline())
        (report,) = [json.loads(line) for line in text.splitlines() if line.startswith('{"pid"')]
        return report, text

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def test_the_venv_has_the_built_guard_and_no_vllm_hotfix(image):
    script = ("import importlib.util, json; from importlib.metadata import distribution, entry_points; "
              "print(json.dumps([importlib.util.find_spec('vllm_hotfix') is None, "
              "importlib.util.find_spec('vllm_hotfix_guard').origin, distribution('vllm-hotfix-guard').version, "
              "[e.value for e in entry_points(group='vllm.general_plugins')]]))")
    done = subprocess.run([str(image["venv"].python), "-c", script], capture_output=True, text=True,
                          env=_env(image), cwd=image["work"])
    no_cli, origin, version, plugins = json.loads(done.stdout)
    assert no_cli and Path(origin).is_relative_to(image["venv"].site_packages) and [p for p in plugins if "hotfix" in p] == ["vllm_hotfix_guard:register"]
    assert version == guard_dist.current().version


def _matrix(image):
    """(name, environment, file in effect?) for what compose / k8s / bake generate, and the broken variants."""
    lock, ready, right = image["lock"], image["work"] / "ready", image["fingerprint"]
    wrong = "hf1-" + "0" * 64
    for strict in ("0", "1"):
        yield f"bake strict={strict}", dict(HOTFIX_LOCK=lock, HOTFIX_STRICT=strict)
        yield f"compose strict={strict}", dict(HOTFIX_LOCK=lock, HOTFIX_STRICT=strict, HOTFIX_READY_DIR=ready)
        yield f"k8s strict={strict}", dict(HOTFIX_LOCK=lock, HOTFIX_STRICT=strict, HOTFIX_READY_DIR=ready,
                                           HOTFIX_EXPECT_FINGERPRINT=right)
        yield f"k8s --trust strict={strict}", dict(HOTFIX_LOCK=lock, HOTFIX_STRICT=strict, HOTFIX_READY_DIR=ready,
                                                   HOTFIX_EXPECT_FINGERPRINT=right, HOTFIX_TRUST=image["policy"])
        yield f"k8s another fingerprint strict={strict}", dict(HOTFIX_LOCK=lock, HOTFIX_STRICT=strict,
                                                               HOTFIX_READY_DIR=ready, HOTFIX_EXPECT_FINGERPRINT=wrong)
        yield f"unsigned lock under a policy strict={strict}", dict(HOTFIX_LOCK=image["unsigned"], HOTFIX_STRICT=strict,
                                                                    HOTFIX_READY_DIR=ready, HOTFIX_TRUST=image["policy"])
        yield f"no ready volume strict={strict}", dict(HOTFIX_LOCK=lock, HOTFIX_STRICT=strict,
                                                       HOTFIX_READY_DIR=image["work"] / "missing")
        yield f"no lock mounted strict={strict}", dict(HOTFIX_LOCK=image["work"] / "missing.lock", HOTFIX_STRICT=strict,
                                                       HOTFIX_READY_DIR=ready)


def test_nothing_escapes_register_unless_strict_mode_stops_a_process_not_in_effect(image):
    (image["work"] / "ready").mkdir(exist_ok=True)
    seen = []
    forks = _Forks(image)
    cold = {("k8s --trust strict=1", "patched"), ("compose strict=1", "reverted")}  # fresh interpreters too
    try:
        for state in ("patched", "reverted"):
            image["target"].write_bytes(image[state] if state == "patched" else image["pristine"])
            for name, env in _matrix(image):
                runs = [forks.load(**env)] + ([_load(image, **env)] if (name, state) in cold else [])
                for report, stderr in runs:
                    _judge(name, state, env, report, stderr, seen)
    finally:
        forks.close()
    image["target"].write_bytes(image["patched"])
    print("\n".join(f"{name:45} {state:9} {'stopped' if stop else 'runs'}" for name, state, stop in seen))
    assert len(seen) == 34


def _judge(name, state, env, report, stderr, seen):
    assert report["hotfix_modules"] == ["vllm_hotfix_guard"], (name, report)  # never the CLI
    ok = state == "patched" and "unsigned" not in name and "no lock" not in name
    lines = [line for line in stderr.splitlines() if "vllm-hotfix guard pid=" in line and " fingerprint=" in line]
    assert len(lines) == 1, (name, state, stderr[-2000:])
    assert (f"{HOTFIX} [lock] in effect" in lines[0]) is ok, (name, state, lines)
    if env["HOTFIX_STRICT"] == "1" and not ok:
        assert (report["raised"] or "").startswith(STOPPED + ": vllm-hotfix: 1 required"), (name, state, report)
    else:
        assert report["raised"] is None, (name, state, report)
    seen.append((name, state, report["raised"] is not None))


def test_ready_flips_as_the_locked_file_is_reverted_and_restored(image, tmp_path):
    """One live process per phase (a process records its verdict when it starts): reverted -> 1, restored
    -> 0, reverted again -> 1; the probe exactly as compose / k8s generate it."""
    where = tmp_path / "ready"
    where.mkdir(mode=0o700)
    env = dict(HOTFIX_LOCK=image["lock"], HOTFIX_STRICT="0", HOTFIX_READY_DIR=where,
               HOTFIX_EXPECT_FINGERPRINT=image["fingerprint"], STAY="1")
    codes = []
    try:
        for data in (image["pristine"], image["patched"], image["pristine"]):
            image["target"].write_bytes(data)
            proc = subprocess.Popen([str(image["venv"].python), str(image["work"] / "loader.py")], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                    env=_env(image, **env), cwd=image["work"])
            try:
                report = next(json.loads(line) for line in proc.stdout if line.startswith("{"))
                assert report["raised"] is None
                probe = subprocess.run([str(image["venv"].python), "-I", "-m", "vllm_hotfix_guard", "ready",
                                        "--expect", "api=1"], capture_output=True, text=True,
                                       env=_env(image, **env), cwd=tmp_path)
                print(probe.returncode, probe.stdout, probe.stderr)
                codes.append(probe.returncode)
            finally:
                proc.stdin.close()
                proc.wait(timeout=60)
    finally:
        image["target"].write_bytes(image["patched"])
    assert codes == [1, 0, 1]


def test_the_lock_verdict_cache_answers_as_a_derivation_under_vllm_s_loader(image, tmp_path):
    """lock_cache.py on the built wheel under vLLM's real loader, as k8s --trust deploys it: the container's first
    process derives its verdict and keeps it, the next one takes it (the derivation not even imported) and says the
    same line; the locked file reverted, the next process is NOT IN EFFECT exactly as a process without any cache
    (which verifies the signatures again: only its (trust) part differs);
    restored, the verdict is derived and kept again."""
    import re
    import time

    where = tmp_path / "ready"
    where.mkdir(mode=0o700)
    env = dict(HOTFIX_LOCK=image["lock"], HOTFIX_STRICT="0", HOTFIX_READY_DIR=where, HOTFIX_TRUST=image["policy"],
               HOTFIX_EXPECT_FINGERPRINT=image["fingerprint"])

    def line(output: str) -> str:
        (found,) = re.findall(r"vllm-hotfix guard pid=\d+ (role=\S+ \S+ fingerprint=.*)", output)  # the summary line
        return found

    def aged(data: bytes) -> None:  # an image's files are older than the cache's racy window (lock_cache.RACY_NS)
        image["target"].write_bytes(data)
        time.sleep(1.2)

    try:
        aged(image["patched"])
        seen = [_load(image, **env) for _ in range(3)]  # the trust verdict's cache, then the lock verdict's
        assert [r["derived"] for r, _ in seen] == [True, True, False]
        assert len(list((where / "lock-verdicts").glob("*.json"))) == 1
        assert line(seen[2][1]) == line(seen[1][1]) and " in effect" in line(seen[2][1])
        image["target"].write_bytes(image["pristine"])
        (report, cached), (_, cold) = _load(image, **env), _load(image, **{**env, "HOTFIX_READY_DIR": ""})
        assert report["derived"] and "NOT IN EFFECT" in line(cached)
        assert line(cached).split("; ", 1)[1] == line(cold).split("; ", 1)[1]  # but the (trust) verdict's cache line
        aged(image["patched"])
        again = [_load(image, **env) for _ in range(2)]
        assert [r["derived"] for r, _ in again] == [True, False] and line(again[1][1]) == line(seen[2][1])
    finally:
        image["target"].write_bytes(image["patched"])

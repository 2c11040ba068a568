"""``benchmarks/guard.py --part ready`` (issue 43): the guard as compose and k8s deploy it, side by side with no
guard, under the real vLLM 0.30.0 loader (tests/fixtures/vllmfull.py: the cached full venv, vllm-hotfix from
this tree's wheel with bytecode, a patched copy of the mamba file on PYTHONPATH).

Arms, alternating in one loop (the order rotating each round, the first round only warms caches):

- ``no guard``: the same vLLM, the guard's folder not on the path -- the baseline;
- ``compose``: HOTFIX_LOCK + HOTFIX_READY_DIR;
- ``k8s --trust``: HOTFIX_LOCK + HOTFIX_STRICT=1 + HOTFIX_READY_DIR + HOTFIX_TRUST (a policy of threshold 1, the
  lock signed by its key) + HOTFIX_EXPECT_FINGERPRINT (the lock's, as the pod annotation carries it): every
  process after the first of a container finds the trust verdict in the ready directory's cache, and after the
  second the whole verdict on the lock (vllm_hotfix_guard/lock_cache.py);
- ``k8s --trust, first process``: the same with the guard's caches emptied before each process (the trust
  verdicts' and the lock verdicts': the process of a container start that verifies the signature and derives);
- ``REF k8s --trust`` (``--vs REF``, default main): vllm-hotfix at that git ref in the same environment, the
  figure before a change.

Printed: per arm the guard's own cost per process (vLLM's ``EntryPoint.load()`` of the guard + its
``register()``, wall and CPU, medians), ``load_general_plugins()`` as a whole against the no-guard baseline
and their ratio, and the modules the hot path imports (the guard's, and any other the guard's import and
``register()`` load that vLLM had not). Budget: <= 5 ms per process.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

NO_GUARD, COMPOSE, K8S, FIRST = "no guard", "compose", "k8s --trust", "k8s --trust, first process"


def setup(scratch: Path, vs: str | None, install_ref) -> tuple[dict, dict]:
    """The full-vLLM fixture, a signed lock and its policy, and each arm's (PYTHONPATH, environment, ready dir)."""
    from fixtures.feed import Key, write_policy
    from fixtures.vllmfull import guard_setup

    from vllm_hotfix_guard.txn.hotfix_lock import load_lock
    from vllm_hotfix_guard.txn.lock_check import expected_fingerprint

    full = guard_setup(scratch / "work")
    keys = scratch / "keys"
    keys.mkdir()
    key = Key(keys, "release")
    signed = subprocess.run([sys.executable, "-m", "vllm_hotfix", "sign", str(full["lock"]), "--key", str(key.key)],
                            capture_output=True, text=True)
    if signed.returncode != 0:
        sys.exit(f"hotfix sign: {signed.stderr}")
    policy = write_policy(scratch / "trust.toml", {"release": key}, ["release"], 1)
    fingerprint = expected_fingerprint(load_lock(full["lock"]))
    lock = {"HOTFIX_LOCK": str(full["lock"])}
    k8s = {**lock, "HOTFIX_STRICT": "1", "HOTFIX_TRUST": str(policy), "HOTFIX_EXPECT_FINGERPRINT": fingerprint}
    guarded = [full["hotfix"], full["patched"]]
    arms = {NO_GUARD: ([full["patched"]], {}), COMPOSE: (guarded, lock), K8S: (guarded, k8s), FIRST: (guarded, k8s)}
    if vs:  # guard.install_ref: vllm-hotfix at that git ref, installed for PYTHONPATH
        arms[f"{vs} {K8S}"] = ([install_ref(vs, scratch), full["patched"]], k8s)
    found = {}
    for number, (name, (path, env)) in enumerate(arms.items()):
        ready = scratch / f"ready-{number}"
        ready.mkdir(mode=0o700)
        found[name] = (path, {**env, "HOTFIX_READY_DIR": str(ready)} if env else env, ready)
    return full, found


def rounds(full: dict, arms: dict, script: Path, count: int) -> dict[str, list[dict]]:
    from fixtures.vllmfull import run

    rows: dict[str, list[dict]] = {name: [] for name in arms}
    names = list(arms)
    for round_no in range(count + 1):
        for name in names[round_no % len(names):] + names[:round_no % len(names)]:
            path, env, ready = arms[name]
            if name == FIRST:
                for cache in ("trust-verdicts", "lock-verdicts"):  # the guard's caches: a container's first process
                    shutil.rmtree(ready / cache, ignore_errors=True)
            done = run(full, [str(full["venv"].python), str(script)], pythonpath=path, **env)
            found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not found:
                sys.exit(f"{name}: exit {done.returncode}: {done.stdout[-600:]} {done.stderr[-600:]}")
            if name != NO_GUARD and ("register" not in found[-1] or " in effect" not in done.stdout + done.stderr
                                     or "NOT IN EFFECT" in done.stdout + done.stderr):
                sys.exit(f"{name}: the guard did not say in effect: {done.stdout[-900:]} {done.stderr[-900:]}")
            if round_no:  # the first process warms caches and bytecode
                rows[name].append(found[-1])
    return rows


def report(rows: dict[str, list[dict]], count: int) -> None:
    def median(found: list[dict], key: str, index: int = 0) -> float:
        return statistics.median(r[key][index] for r in found) * 1e3

    def own(found: list[dict], index: int) -> float:
        return statistics.median(r["vllm_hotfix_guard"][index] + r["register"][index] for r in found) * 1e3

    base = median(rows[NO_GUARD], "load_general_plugins")
    print(f"{count} rounds, the arms in rotating order, medians; budget: the guard's import + register() <= 5 ms per "
          f"process")
    print(f"  {NO_GUARD:34} load_general_plugins() {base:7.1f} ms (the baseline)")
    for name, found in rows.items():
        if name == NO_GUARD:
            continue
        whole = median(found, "load_general_plugins")
        print(f"  {name:34} load_general_plugins() {whole:7.1f} ms ({whole / base:.2f}x the baseline); the guard "
              f"per process: {own(found, 0):5.2f} ms wall, {own(found, 1):5.2f} ms CPU "
              f"(import {median(found, 'vllm_hotfix_guard'):.2f} + register() {median(found, 'register'):.2f} ms wall)")
    verdict = "met" if own(rows[K8S], 1) <= 5 else "NOT met"
    print(f"  budget, {K8S} (every process of a container but its first), CPU: {verdict}")
    for name in (COMPOSE, K8S):
        modules = rows[name][-1]["module_names"]
        print(f"  {name}: the hot path imports {len(modules)} guard modules: {', '.join(modules)}")
        other = rows[name][-1].get("other_imports", [])
        print(f"  {name}: other modules the guard's import + register() load: {', '.join(other) or 'none'}")
        if any(m.split(".")[0] == "vllm_hotfix" for m in modules):
            print("  NOTE: the CLI package (vllm_hotfix) was imported on the hot path")


def ready_part(scratch: Path, count: int, vs: str | None, timer: str, install_ref) -> None:
    full, arms = setup(scratch, vs, install_ref)
    script = full["work"] / "timer.py"
    script.write_text(timer)
    report(rounds(full, arms, script, count), count)

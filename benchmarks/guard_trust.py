"""What a trust policy adds to the guard in a vLLM process, under the real vLLM 0.30.0 loader (the cached full
venv of tests/realdata.py; tests/fixtures/vllmfull.py installs this tree's wheel beside it, nothing written
into the cache).

    python benchmarks/guard_trust.py [--rounds 7]

Each round starts three fresh processes, in rotating order, that call vLLM's own ``load_general_plugins()``
with ``HOTFIX_LOCK`` set and time the guard's ``register()`` inside the process (wall and CPU):
- peer: no policy (the guard as without issue 36);
- first: ``HOTFIX_TRUST`` (threshold 2, two `minisign -S` signatures: four Ed25519 verifications) and an
  empty ``HOTFIX_READY_DIR``: this process verifies the signatures and leaves the verdict;
- cached: the same with the verdict of an earlier process in ``HOTFIX_READY_DIR``.
Budgets (issue 36): first <= 30 ms added over the peer; cached: the guard stays <= 5 ms (the peer's own
figure is docs/guard-code.md's), printed as the difference to the peer and as a ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fixtures.vllmfull import guard_setup, run  # noqa: E402

TIMER = r'''
import json, time
import vllm.plugins
from vllm.plugins import load_general_plugins

spent = {}
real_group = vllm.plugins.load_plugins_by_group


def timed_group(group):
    plugins = real_group(group)
    if "vllm_hotfix_guard" in plugins:
        func = plugins["vllm_hotfix_guard"]

        def timed():
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                func()
            finally:
                spent["register"] = [time.perf_counter() - wall, time.process_time() - cpu]
        plugins["vllm_hotfix_guard"] = timed
    return plugins


vllm.plugins.load_plugins_by_group = timed_group
load_general_plugins()
import sys
spent["verifier"] = "vllm_hotfix_guard.core.ed25519" in sys.modules
print(json.dumps(spent))
'''


def signed_lock(full, scratch: Path) -> tuple[Path, Path]:
    """The fixture's lock, signed by two fresh minisign keys, and the threshold-2 policy listing them."""
    lock = scratch / "lock" / "hotfix.lock"
    lock.parent.mkdir(parents=True)
    lock.write_bytes(full["lock"].read_bytes())
    policy = "threshold = 2\n"
    for name in ("release", "sre"):
        pub, key = scratch / f"{name}.pub", scratch / f"{name}.key"
        subprocess.run(["minisign", "-G", "-W", "-f", "-p", pub, "-s", key], check=True, capture_output=True)
        key_id = pub.read_text().splitlines()[0].split()[-1]
        subprocess.run(["minisign", "-S", "-s", key, "-m", lock, "-x", lock.parent / f"hotfix.lock.{key_id}.minisig"],
                       check=True, capture_output=True)
        policy += f'[[keys]]\nname = "{name}"\nminisign = "{pub.read_text().splitlines()[1]}"\n'
    (scratch / "trust.toml").write_text(policy)
    return lock, scratch / "trust.toml"


def once(full, script: Path, **env) -> dict:
    done = run(full, [str(full["venv"].python), str(script)], **env)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {done.stderr[-600:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="guard-trust-") as scratch:
        work = Path(scratch)
        full = guard_setup(work / "full")
        lock, policy = signed_lock(full, work)
        script = work / "timer.py"
        script.write_text(TIMER)
        warm = work / "ready-warm"
        warm.mkdir()
        kinds = {"peer (no policy)": dict(HOTFIX_LOCK=str(lock)),
                 "first (verifies)": None,
                 "cached (an earlier process's verdict)": dict(HOTFIX_LOCK=str(lock), HOTFIX_TRUST=str(policy),
                                                                HOTFIX_READY_DIR=str(warm))}
        once(full, script, **kinds["cached (an earlier process's verdict)"])  # leaves the verdict
        rows: dict[str, list] = {kind: [] for kind in kinds}
        for round_no in range(args.rounds + 1):
            order = list(kinds)[round_no % 3:] + list(kinds)[:round_no % 3]
            for kind in order:
                env = kinds[kind]
                if env is None:  # a fresh, empty ready directory each time
                    cold = Path(tempfile.mkdtemp(dir=work, prefix="ready-"))
                    env = dict(HOTFIX_LOCK=str(lock), HOTFIX_TRUST=str(policy), HOTFIX_READY_DIR=str(cold))
                found = once(full, script, **env)
                if round_no:  # the first round warms the page cache
                    rows[kind].append((found["register"][0] * 1e3, found["register"][1] * 1e3, found["verifier"]))
    peer_wall = statistics.median(r[0] for r in rows["peer (no policy)"])
    peer_cpu = statistics.median(r[1] for r in rows["peer (no policy)"])
    print(f"the guard's register() under vLLM 0.30.0's load_general_plugins(), medians of {args.rounds} rounds")
    for kind, values in rows.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        verifier = {v[2] for v in values}
        print(f"  {kind:40} wall {wall:6.1f} ms  cpu {cpu:6.1f} ms  added wall {wall - peer_wall:+6.1f} ms "
              f"cpu {cpu - peer_cpu:+6.1f} ms  ratio {wall / peer_wall:4.2f}x  verifier imported: {sorted(verifier)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

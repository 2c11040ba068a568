"""What checking a signed lock costs the process that checks it: a trust policy of threshold 2 (two
signature files, each with its global signature: four Ed25519 verifications) on a lock, with the stdlib
verifier (core/ed25519.py), against `minisign -V` on the same files and against `cryptography` (OpenSSL).

    python benchmarks/signatures.py [--rounds 15]

Measured three ways, medians of rotating rounds (CPU time beside wall time):
- the added cost in a fresh process: `python -c` reading the policy, the signatures and the lock and
  judging them, minus the same process that only reads and parses the lock (what the guard does anyway);
- in one process, the verdict alone (first one: with the base point's table; then a warm one), and one
  Ed25519 verification by core.ed25519 and by cryptography;
- the peer: two `minisign -V -H` processes (one per signature file), as a shell script would check them.
Budget (issue 36): <= 30 ms added to the process that verifies.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

JUDGE = """
import time, sys
from pathlib import Path
from vllm_hotfix_guard.txn import hotfix_lock, signed
lock_path = Path(sys.argv[1])
data, lock = hotfix_lock.read_lock(lock_path)
policy = signed.load_policy(sys.argv[2], now=time.time(), env={}, pinned="/nonexistent")
verdict = signed.lock_verdict(lock_path, data, lock, policy, now=time.time(), subject="hotfix.lock")
assert verdict.trusted, verdict.refusals
"""
PARSE_ONLY = """
import sys
from pathlib import Path
from vllm_hotfix_guard.txn import hotfix_lock
hotfix_lock.read_lock(Path(sys.argv[1]))
"""


def timed(argv: list[str]) -> tuple[float, float]:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True)
    wall = time.perf_counter() - start
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    return wall, now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime


def make_signed_lock(scratch: Path) -> tuple[Path, Path, list[tuple[Path, Path]]]:
    from test_hotfix_lock import make_lock

    from vllm_hotfix_guard.txn import hotfix_lock

    lock = make_lock()
    lock = hotfix_lock.Lock(site_packages=lock.site_packages, hotfixes=lock.hotfixes, version=7,
                         expires="2099-01-01T00:00:00Z")
    path = scratch / "hotfix.lock"
    path.write_bytes(hotfix_lock.dump_lock(lock))
    pairs, policy = [], "threshold = 2\n"
    for name in ("release", "sre"):
        pub, key = scratch / f"{name}.pub", scratch / f"{name}.key"
        subprocess.run(["minisign", "-G", "-W", "-f", "-p", pub, "-s", key], check=True, capture_output=True)
        key_id = pub.read_text().splitlines()[0].split()[-1]
        sig = scratch / f"hotfix.lock.{key_id}.minisig"
        subprocess.run(["minisign", "-S", "-s", key, "-m", path, "-x", sig], check=True, capture_output=True)
        policy += f'[[keys]]\nname = "{name}"\nminisign = "{pub.read_text().splitlines()[1]}"\n'
        pairs.append((pub, sig))
    (scratch / "trust.toml").write_text(policy)
    return path, scratch / "trust.toml", pairs


def in_process(lock_path: Path, policy_path: Path, rounds: int) -> dict[str, float]:
    """CPU ms (time.process_time: the machine may be shared): importing the verifier's modules, the first verdict, a warm verdict, one verification each."""
    start = time.process_time()
    from vllm_hotfix_guard.core import ed25519, minisign, trust_policy  # noqa: F401
    from vllm_hotfix_guard.txn import hotfix_lock, signed

    imported = time.process_time() - start
    data, lock = hotfix_lock.read_lock(lock_path)

    def judge():
        policy = signed.load_policy(policy_path, now=time.time(), env={}, pinned="/nonexistent")
        return signed.lock_verdict(lock_path, data, lock, policy, now=time.time(), subject="hotfix.lock")

    start = time.process_time()
    assert judge().trusted
    first = time.process_time() - start
    warm = []
    for _ in range(rounds):
        start = time.process_time()
        judge()
        warm.append(time.process_time() - start)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    message = minisign.prehash(data)
    signature = private.sign(message)
    ours, openssl = [], []
    for _ in range(rounds):
        start = time.process_time()
        assert ed25519.verify(public, message, signature)
        ours.append(time.process_time() - start)
        start = time.process_time()
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
        openssl.append(time.process_time() - start)
    return {"import the verifier (core.ed25519, minisign, policytoml, trust, txn.signed)": imported * 1000,
            "first verdict (threshold 2: 4 verifications, + the base table)": first * 1000,
            "warm verdict": statistics.median(warm) * 1000,
            "one Ed25519 verification, core.ed25519": statistics.median(ours) * 1000,
            "one Ed25519 verification, cryptography (OpenSSL)": statistics.median(openssl) * 1000}


def main() -> int:
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):  # timing imports that compile their source measures the compiler
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if shutil.which("minisign") is None:
        raise SystemExit("minisign is not installed (apt-get install -y minisign)")
    with tempfile.TemporaryDirectory(prefix="signatures-") as scratch:
        lock, policy, pairs = make_signed_lock(Path(scratch))
        python = sys.executable
        commands = {
            "parse the lock only": [python, "-c", PARSE_ONLY, str(lock)],
            "parse + judge (threshold 2)": [python, "-c", JUDGE, str(lock), str(policy)],
            "minisign -V x2": ["sh", "-c", " && ".join(f"minisign -V -H -q -m {lock} -x {sig} -p {pub}"
                                                       for pub, sig in pairs)],
        }
        for argv in commands.values():
            timed(argv)
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        names = list(commands)
        for round_no in range(args.rounds):
            for name in names[round_no % len(names):] + names[:round_no % len(names)]:
                w, c = timed(commands[name])
                wall.setdefault(name, []).append(w)
                cpu.setdefault(name, []).append(c)
        inside = in_process(lock, policy, args.rounds)
    med = {name: statistics.median(values) * 1000 for name, values in wall.items()}
    for name in names:
        print(f"{name:30s} median {med[name]:7.1f} ms   cpu {statistics.median(cpu[name]) * 1000:7.1f} ms")
    added = med["parse + judge (threshold 2)"] - med["parse the lock only"]
    cpu_added = (statistics.median(cpu["parse + judge (threshold 2)"]) - statistics.median(cpu["parse the lock only"])) * 1000
    print(f"added CPU in a fresh process: {cpu_added:.1f} ms")
    print(f"added by the signatures in a fresh process: {added:.1f} ms (budget 30 ms); "
          f"{added / med['minisign -V x2']:.2f}x two `minisign -V` processes ({med['minisign -V x2']:.1f} ms)")
    for name, ms in inside.items():
        print(f"in process, CPU: {name:70s} {ms:7.2f} ms")
    print(f"core.ed25519 / OpenSSL for one verification: "
          f"{inside['one Ed25519 verification, core.ed25519'] / inside['one Ed25519 verification, cryptography (OpenSSL)']:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

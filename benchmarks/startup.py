"""What a container pays at start: `hotfix verify --lock` (with and without --python) against
`python -c 'import click'`, on a real vLLM 0.30.0 install with the mamba hotfix mounted (patched).

    python benchmarks/startup.py [--rounds 9]

Every command runs as a subprocess of the same interpreter; the order rotates each round; medians of
wall and CPU (user + system) time are printed with the ratios.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import realdata  # noqa: E402

HOTFIX = "mamba-align-block-size"


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True)
    wall = time.perf_counter() - start
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    return wall, now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
        scratch = Path(scratch)
        venv = realdata.copy_venv(realdata.vllm_template("0.30.0"), scratch / "venv")
        env = dict(os.environ, HOTFIX_STATE_DIR=str(scratch / "state"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        hotfix = [sys.executable, "-m", "vllm_hotfix"]
        subprocess.run([*hotfix, "export", HOTFIX, "--to", str(scratch / "export"), "--python", str(venv.python)],
                       env=env, check=True, capture_output=True)
        lock = scratch / "export" / "hotfix.lock"
        exported = scratch / "export" / HOTFIX
        for path in exported.rglob("*.py"):  # "mount" the patched file, as the bind mount would
            shutil.copyfile(path, venv.site_packages / path.relative_to(exported))
        # hotfix installed in the target interpreter itself (as a baked image has it): no probe process
        site = subprocess.run([str(venv.python), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "vllm_hotfix_src.pth").write_text(str(Path(__file__).resolve().parent.parent / "src") + "\n")
        deps = subprocess.run([sys.executable, "-c", "import click, os; print(os.path.dirname(os.path.dirname(click.__file__)))"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "vllm_hotfix_deps.pth").write_text(deps + "\n")
        commands = {
            "import click": [sys.executable, "-c", "import click"],
            "verify --lock --python": [*hotfix, "verify", "--lock", str(lock), "--python", str(venv.python)],
            "verify --lock (in image)": [str(venv.python), "-m", "vllm_hotfix", "verify", "--lock", str(lock)],
        }
        for argv in commands.values():  # warm caches and bytecode
            timed(argv, env)
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        names = list(commands)
        for round_no in range(args.rounds):
            order = names[round_no % len(names):] + names[:round_no % len(names)]
            for name in order:
                w, c = timed(commands[name], env)
                wall.setdefault(name, []).append(w)
                cpu.setdefault(name, []).append(c)
    base = statistics.median(wall["import click"])
    for name in names:
        print(f"{name:26s} median {statistics.median(wall[name]) * 1000:7.1f} ms   cpu "
              f"{statistics.median(cpu[name]) * 1000:7.1f} ms   {statistics.median(wall[name]) / base:5.2f}x import click")
    return 0


if __name__ == "__main__":
    sys.exit(main())

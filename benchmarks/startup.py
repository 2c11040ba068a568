"""What a container pays at start: `hotfix verify --lock` (with and without --python) against
`python -c 'import click'`, on a real vLLM 0.30.0 install with the mamba hotfix mounted (patched).

    python benchmarks/startup.py [--rounds 11]

vllm-hotfix is installed as users install it: its freshly built wheel (compiled on install, a console
script `hotfix`), once into a tool venv of its own (pipx / uv tool: the `--python` case, a probe
process runs in the vLLM interpreter) and once into the vLLM venv itself (a baked image: the probe
runs in-process). Both get click & co. from this interpreter's site-packages through a .pth. The
baseline `import click` runs in the tool venv. `python -m vllm_hotfix` is shown too (runpy costs a
few ms more than the console script).

The order rotates each round; medians of wall and CPU (user + system) time are printed with the ratios.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import realdata  # noqa: E402

HOTFIX = "mamba-align-block-size"


def install_hotfix(venv: realdata.Venv, wheel: Path) -> Path:
    """vllm-hotfix's wheel into VENV (no deps: they come from this interpreter's site-packages)."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv.python), "install", "-q", "--no-deps",
                    "--disable-pip-version-check", str(wheel)], check=True)
    (venv.site_packages / "zz_hotfix_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv.root / "bin" / "hotfix"


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True)
    wall = time.perf_counter() - start
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    return wall, now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime


def _signed(scratch: Path, lock: Path) -> Path:
    """Two keys (`minisign -G -W`) sign the lock with `minisign -S`; the policy lists both, threshold 2."""
    policy = "threshold = 2\n"
    for name in ("release", "sre"):
        pub, key = scratch / f"{name}.pub", scratch / f"{name}.key"
        subprocess.run(["minisign", "-G", "-W", "-f", "-p", pub, "-s", key], check=True, capture_output=True)
        key_id = pub.read_text().splitlines()[0].split()[-1]
        subprocess.run(["minisign", "-S", "-s", key, "-m", lock, "-x", lock.parent / f"{lock.name}.{key_id}.minisig"],
                       check=True, capture_output=True)
        policy += f'[[keys]]\nname = "{name}"\nminisign = "{pub.read_text().splitlines()[1]}"\n'
    (scratch / "trust.toml").write_text(policy)
    return scratch / "trust.toml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
        scratch = Path(scratch)
        wheel = realdata.build_project_wheel(scratch / "build")
        image = realdata.copy_venv(realdata.vllm_template("0.30.0"), scratch / "image")
        tool = realdata.make_venv(scratch / "tool")
        image_hotfix, tool_hotfix = install_hotfix(image, wheel), install_hotfix(tool, wheel)
        env = dict(os.environ, HOTFIX_STATE_DIR=str(scratch / "state"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for name in ("HOTFIX_PYTHON", "HOTFIX_LOCK", "HOTFIX_REQUIRE", "PYTHONPATH"):
            env.pop(name, None)
        subprocess.run([str(tool_hotfix), "export", HOTFIX, "--to", str(scratch / "export"), "--python", str(image.python)],
                       env=env, check=True, capture_output=True)
        lock = scratch / "export" / "hotfix.lock"
        exported = scratch / "export" / HOTFIX
        for path in exported.rglob("*.py"):  # "mount" the patched file, as the bind mount would
            shutil.copyfile(path, image.site_packages / path.relative_to(exported))
        trust = _signed(scratch, lock) if shutil.which("minisign") else None
        commands = {
            "import click": [str(tool.python), "-c", "import click"],
            "verify --lock --python": [str(tool_hotfix), "verify", "--lock", str(lock), "--python", str(image.python)],
            "verify --lock (in image)": [str(image_hotfix), "verify", "--lock", str(lock)],
            "  same, python -m": [str(image.python), "-m", "vllm_hotfix", "verify", "--lock", str(lock)],
        }
        if trust is not None:  # issue 36: a trust policy of threshold 2 (two signatures, each with its global one)
            commands["verify --lock (in image), policy"] = [str(image_hotfix), "verify", "--lock", str(lock), "--trust",
                                                            str(trust)]
        full = realdata.VENVS / f"vllm-full-0.30.0-py{sys.version_info[0]}.{sys.version_info[1]}" / "bin" / "python"
        if full.exists():  # the real image's site-packages (~200 distributions): what the probe costs there
            probe = (Path(__file__).resolve().parent.parent / "src" / "vllm_hotfix_guard" / "install" / "probe.py").read_text()
            commands["full vLLM venv: python"] = [str(full), "-c", "pass"]
            commands["full vLLM venv: probe"] = [str(full), "-c", probe, "vllm"]
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

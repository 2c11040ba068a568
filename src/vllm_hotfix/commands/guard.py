"""`hotfix guard --print-env`: the environment that turns on the in-process guard (vllm_hotfix_guard/plugin.py);
`hotfix guard --check-env`: whether this environment would keep the guard from loading at all."""

from __future__ import annotations

import json
import os
import shlex

from vllm_hotfix.catalog.model import ID_PATTERN
from vllm_hotfix_guard.env import PLUGIN_NAME
from vllm_hotfix_guard.errors import NotInEffect, UsageError
from vllm_hotfix_guard.output import emit_json, note, say
from vllm_hotfix_guard.settings import LOCK_ENV, REQUIRE_ENV, STRICT_ENV


def run(*, print_env: bool, check_env: bool, lock_file: str, require: str | None, strict: bool, fmt: str,
        python: str | None, as_json: bool, build_dist=None) -> int:
    if build_dist is not None:
        return build_distribution(build_dist, as_json=as_json)
    if check_env:
        return check_environment(python, as_json=as_json)
    if not print_env:
        raise UsageError("give --print-env, --check-env or --build-dist DIR", hint="`hotfix guard --help` shows them")
    env = guard_env(lock_file=lock_file, require=require, strict=strict)
    if as_json:
        emit_json({"env": env, "format": fmt, "lines": render(env, fmt), "plugin": PLUGIN_NAME})
        return 0
    for line in render(env, fmt):
        say(line)
    note(f"if the service sets VLLM_PLUGINS, add {PLUGIN_NAME} to it; the image needs the guard: mount what `hotfix export` "
         "writes into EXPORT/guard (hotfix compose / hotfix k8s do), or install its wheel (hotfix guard --build-dist DIR)")
    return 0


def guard_env(*, lock_file: str, require: str | None, strict: bool) -> dict[str, str]:
    if require is not None:
        ids = [part.strip() for part in require.split(",") if part.strip()]
        bad = [i for i in ids if not ID_PATTERN.fullmatch(i)]
        if not ids or bad:
            raise UsageError(f"--require: not a hotfix id: {', '.join(bad) or repr(require)}",
                             hint="give comma-separated ids as `hotfix list` shows them, e.g. --require mamba-align-block-size")
        env = {REQUIRE_ENV: ",".join(ids)}
    else:
        if not lock_file.startswith("/"):
            raise UsageError(f"--lock {lock_file}: must be an absolute path inside the container",
                             hint="every vLLM process resolves it from its own working directory")
        env = {LOCK_ENV: lock_file}
    env[STRICT_ENV] = "1" if strict else "0"
    return env


def render(env: dict[str, str], fmt: str) -> list[str]:
    if fmt == "shell":
        return [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    if fmt == "k8s":
        lines = ["env:"]
        for name, value in env.items():
            lines += [f"  - name: {name}", f"    value: {json.dumps(value)}"]
        return lines
    return ["environment:", *(f"  {name}: {json.dumps(value)}" for name, value in env.items())]


def check_environment(python: str | None, *, as_json: bool = False) -> int:
    """The guard cannot say that it never ran (a VLLM_PLUGINS that leaves it out, an entry point that is
    missing or fails to import): say it here, in the environment vLLM is started with, about the
    interpreter that runs vLLM -- resolved as every command resolves it (``--python`` / HOTFIX_PYTHON,
    else hotfix's own if it imports vllm, else the `vllm` command's on PATH), the entry points read and
    the first one loaded *there* by the probe."""
    from vllm_hotfix_guard.plugin import strict
    from vllm_hotfix_guard.env import environment_problems
    from vllm_hotfix.flow.resolve import Resolver

    from vllm_hotfix_guard.install.probe import GUARD_LOAD

    target = Resolver(python, guard=GUARD_LOAD).guard_target()  # entry points read, and the first loaded, there
    facts = target.guard
    assert facts is not None
    problems = environment_problems(entry_points=facts.entry_points, load_error=facts.load_error,
                                    python=target.python)
    turned_on = [name for name in (LOCK_ENV, REQUIRE_ENV) if os.environ.get(name, "").strip()]
    if as_json:
        emit_json({"ok": not problems, "python": target.python, "package": target.package,
                   "plugin": PLUGIN_NAME, "entry_points": list(facts.entry_points), "loaded": facts.loaded,
                   "load_error": facts.load_error,
                   "vllm_plugins": os.environ.get("VLLM_PLUGINS"), "problems": problems,
                   "checks": turned_on, "strict": strict()})
        return int(NotInEffect.exit_code) if problems else 0
    for problem in problems:
        say(f"NOT IN EFFECT: guard: {problem}")
    if not problems:
        say(f"ok: vLLM will load {PLUGIN_NAME} in every process started with this environment by {target.python}")
    if turned_on:
        say(f"guard: checks {' and '.join(turned_on)}{', strict (HOTFIX_STRICT)' if strict() else ', logs only (HOTFIX_STRICT unset)'}")
    else:
        say("guard: turned off here (set HOTFIX_LOCK or HOTFIX_REQUIRE; `hotfix guard --print-env` prints the lines)")
    return int(NotInEffect.exit_code) if problems else 0


def build_distribution(out_dir, *, as_json: bool) -> int:
    """`hotfix guard --build-dist DIR`: the guard's distribution (containers/guard_dist.py) written whole into
    DIR (its wheel, its site-packages tree); DIR must be new, empty, or a DIR written so before."""
    from pathlib import Path

    from vllm_hotfix.containers import guard_dist
    from vllm_hotfix.txn import staged

    out_dir = Path(out_dir)
    dist = guard_dist.current()
    staged.check_replaceable(out_dir, lambda d: (d / guard_dist.SITE_DIR).is_dir() and any(d.glob("*.whl")),
                             what="a guard distribution written by `hotfix guard --build-dist`",
                             hint="name a new or empty directory")
    staged.write_directory(out_dir, guard_dist.tree_files(dist), suffix=".hotfix-guard", what="the guard distribution")
    wheel = out_dir / dist.wheel_name
    if as_json:
        emit_json({"distribution": guard_dist.DISTRIBUTION, "version": dist.version, "wheel": str(wheel),
                   "site_packages": str(out_dir / guard_dist.SITE_DIR), "files": [rel for rel, _ in dist.files]})
        return 0
    say(f"wrote {wheel} ({guard_dist.DISTRIBUTION} {dist.version}, {len(dist.files)} files, stdlib only)")
    say(f"wrote {out_dir / guard_dist.SITE_DIR}: {' and '.join(dist.top)}, to mount into the image's site-packages")
    say(f"install it with: python -m pip install --no-index --no-deps {wheel}")
    return 0

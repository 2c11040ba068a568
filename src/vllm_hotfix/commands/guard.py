"""`hotfix guard --print-env`: the environment that turns on the in-process guard (plugin.py)."""

from __future__ import annotations

import json
import shlex

from vllm_hotfix.errors import UsageError
from vllm_hotfix.catalog.model import ID_PATTERN
from vllm_hotfix.output import emit_json, note, say

PLUGIN_NAME = "vllm_hotfix_guard"


def run(*, print_env: bool, lock_file: str, require: str | None, strict: bool, fmt: str, as_json: bool = False) -> int:
    env = guard_env(lock_file=lock_file, require=require, strict=strict)
    if as_json:
        emit_json({"env": env, "format": fmt, "lines": render(env, fmt), "plugin": PLUGIN_NAME})
        return 0
    for line in render(env, fmt):
        say(line)
    note(f"if the service sets VLLM_PLUGINS, add {PLUGIN_NAME} to it; vllm-hotfix must be installed in the image")
    return 0


def guard_env(*, lock_file: str, require: str | None, strict: bool) -> dict[str, str]:
    if require is not None:
        ids = [part.strip() for part in require.split(",") if part.strip()]
        bad = [i for i in ids if not ID_PATTERN.fullmatch(i)]
        if not ids or bad:
            raise UsageError(f"--require: not a hotfix id: {', '.join(bad) or repr(require)}",
                             hint="give comma-separated ids as `hotfix list` shows them, e.g. --require mamba-align-block-size")
        env = {"HOTFIX_REQUIRE": ",".join(ids)}
    else:
        if not lock_file.startswith("/"):
            raise UsageError(f"--lock {lock_file}: must be an absolute path inside the container",
                             hint="every vLLM process resolves it from its own working directory")
        env = {"HOTFIX_LOCK": lock_file}
    env["HOTFIX_STRICT"] = "1" if strict else "0"
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

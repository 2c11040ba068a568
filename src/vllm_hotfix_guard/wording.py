"""The words of the guard's verdicts: a hotfix's state as one part of its line, with the advice that runs as
pasted (the interpreter, a record's catalog). plugin.py assembles the verdicts; this says them. Stdlib only."""

from __future__ import annotations

import os
import sys

from vllm_hotfix_guard.verdicts import Verdict


def apply_unrecorded(hotfix_id: str) -> str:
    return catalog_command(hotfix_id, f"hotfix apply {hotfix_id} {python_option()}")


def catalog_command(hotfix_id: str, command: str) -> str:
    """A command about an id no record names the catalog of: backticked (to paste) when this environment's
    hotfix finds the id (the built-in catalog, or HOTFIX_CATALOG set here), else the form to complete."""
    from vllm_hotfix_guard.pins import builtin_dirs

    plain = hotfix_id.replace("-", "").isalnum() and hotfix_id.isascii() and hotfix_id == hotfix_id.lower()
    builtin = plain and any((folder / "manifests" / f"{hotfix_id}.toml").is_file() for folder in builtin_dirs())
    if builtin or os.environ.get("HOTFIX_CATALOG", "").strip():
        return f"`{command}`"
    return f"{command} --catalog DIR (the catalog that has it)"


def python_option(catalog: str | None = None) -> str:
    """How a command names this process's interpreter (and a record's catalog, unless HOTFIX_CATALOG has it) in advice."""
    import shlex

    listed = {os.path.abspath(d) for d in os.environ.get("HOTFIX_CATALOG", "").split(os.pathsep) if d}
    words = ["--python", sys.executable] + (["--catalog", catalog] if catalog and catalog not in listed else [])
    return " ".join(shlex.quote(w) for w in words)


def invalid_id(hotfix_id: str) -> Verdict:
    """HOTFIX_REQUIRE names something that breaks the id rule (core.docfields.is_record_id): refused,
    shown quoted (a newline or an escape in it cannot forge a line)."""
    from vllm_hotfix_guard.output import quoted

    return Verdict(quoted(hotfix_id), False, "invalid: HOTFIX_REQUIRE names no hotfix id ([A-Za-z0-9][A-Za-z0-9._+-]*, "
                   "at most 128 characters)", "fix HOTFIX_REQUIRE (comma-separated hotfix ids)", "require")


def unreadable_state(hotfix_id: str, problems: list[str]) -> Verdict:
    return Verdict(hotfix_id, False, f"unknown: cannot read the recorded state: {'; '.join(problems)}",
                   "fix the permissions of these files (the user running vLLM must read them) or restore them "
                   "from a backup; `hotfix status` then says more", "require")


def verdict_of(hotfix_id: str, package: str, state: str, detail: str, files, installed_version, origin: str,
             option: str | None = None, unnamed: bool = False) -> Verdict:
    """core.verdict's state of one hotfix as one guard line: the state, the first file not in effect,
    and what to do (``unnamed``: a lock without code names, txn/lock_check.unnamed_code). Names from a lock or a
    record are printed quoted (output.quote_path), so no input can forge a line that `hotfix doctor` later reads."""
    from vllm_hotfix_guard.core import verdict

    option = option if option is not None else python_option()
    if state == verdict.FIXED_UPSTREAM:
        return Verdict(hotfix_id, True, f"fixed-upstream: {detail}", source=origin)
    if verdict.in_effect(state):
        return Verdict(hotfix_id, True, source=origin)
    if installed_version is None and files and all(f.where is None for f in files):
        return not_importable(hotfix_id, package, origin)
    python = option[option.index("--python"):] if "--python" in option else option  # a lock's: --lock L --python P
    command = catalog_command(hotfix_id, f"hotfix export {hotfix_id} --to hotfix-export {python}")
    export = f"re-export against this image ({command}), or run `hotfix verify {option}` for details"
    if unnamed:
        from vllm_hotfix_guard.txn.lock_check import unnamed_advice
        return Verdict(hotfix_id, False, f"{state}: {detail}", unnamed_advice(command), origin)
    if state == verdict.STALE:
        remedy = verdict.stale_advice(hotfix_id, option, release=installed_version, covered=None) \
            if origin == "require" else export
        return Verdict(hotfix_id, False, f"{state}: {detail}", remedy, origin)
    if state == verdict.STALE_BYTECODE:
        remedy = verdict.bytecode_advice(hotfix_id, option) if origin == "require" else \
            "remove those __pycache__ entries from the image (this process compiles the source; others load them)"
        return Verdict(hotfix_id, False, f"{state}: {detail}", remedy, origin)
    if state == verdict.INTERRUPTED:  # the journal is this install's: recover it, whatever the check was given by
        return Verdict(hotfix_id, False, f"{state}: {detail}", f"run `hotfix recover {python}`", origin)
    file = next((f for f in files if f.state != verdict.PATCHED), None)
    if file is None or state in (verdict.UNKNOWN, verdict.NOT_APPLICABLE):
        remedy = f"run `hotfix status {hotfix_id} {option}`" if origin == "require" else export
        return Verdict(hotfix_id, False, f"{state}: {detail}", remedy, origin)
    from vllm_hotfix_guard.output import quote_path  # here: a process whose hotfixes are in effect never needs it

    if file.sha256 is None:
        problem = f"{state}: {quote_path(file.where)} is missing"
    else:
        what = " (the unpatched original)" if file.state == verdict.BASELINE else ""
        problem = f"{state}: {quote_path(file.where)} has sha256 {file.sha256[:12]}{what}, expected {(file.expected or '')[:12]}"
    if origin == "lock":
        remedy = (f"bind-mount the files that {command} writes over the copy this process imports (hotfix compose "
                  f"{hotfix_id} --service SERVICE), then check with `hotfix verify {option}`")
    elif state == verdict.LOST:
        remedy = f"the install was replaced (rebuild/reinstall?): re-apply with `hotfix apply {hotfix_id} {option}`"
    else:
        remedy = f"the file changed after the hotfix was applied: run `hotfix status {hotfix_id} {option}`"
    return Verdict(hotfix_id, False, problem, remedy, origin)


def not_importable(hotfix_id: str, package: str, origin: str) -> Verdict:
    return Verdict(hotfix_id, False, f"unknown: package {package} is not importable in this process ({sys.executable})",
                   "run vLLM with the interpreter the hotfix was applied to", origin)

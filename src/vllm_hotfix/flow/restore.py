"""A target's own files: which of them are not the release's (``not_pristine``: RECORD for a wheel, git status
for a checkout -- THE rule apply refuses "baseline not pristine" by, status words `changed` and audit counts),
and how they come back when no hotfix command can put them back (a file deleted, edited by hand, an older
release's file left in place): THE command that restores them, as it runs pasted (``restore_command``: pip's
reinstall of the exact installed release for a wheel install, git's checkout of the paths for a checkout)
and the words around it (``restore_advice``). status (a drifted record, an unrecorded hotfix that does not
apply, a stale record over foreign files) and apply (its refusals) print it; nothing here runs it. Reads only."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Iterable, Sequence

from vllm_hotfix.install.locate import Target
from vllm_hotfix_guard.output import quote_path


def restore_command(target: Target, paths: Iterable[str]) -> str | None:
    """The shell command that puts ``paths`` (relative to the target root) back as the installed release
    has them, or None when nothing can name that release's files here (an install with neither RECORD nor
    git, a --root site-packages without the interpreter pip must install for)."""
    paths = sorted(paths)
    if target.kind == "wheel" and target.dist_info is not None and target.distribution and target.version:
        if target.python is None:
            return None
        # pip >= 22.3 installs for another interpreter: the target's venv may have no pip of its own
        return (f"python3 -m pip --python {shlex.quote(str(target.python))} install --force-reinstall --no-deps "
                f"{shlex.quote(f'{target.distribution}=={target.version}')}")
    if target.git is not None and paths:
        top = target.git.root
        rels = " ".join(shlex.quote(os.path.relpath(Path(target.root) / p, top)) for p in paths)
        return f"git -C {shlex.quote(str(top))} checkout -- {rels}"
    return None


def restore_advice(target: Target, paths: Sequence[str], then: Sequence[str] = (), *,
                   undoes: Sequence[str] = ()) -> str:
    """"`CMD` puts back ..., then `STEP`, then `STEP`": the restore, then ``then`` (commands, in order).
    ``undoes``: the recorded hotfixes whose files the restore puts back too (a reinstall puts back every
    file of the distribution): said, since their records then read `lost` until they are applied again."""
    what = ", ".join(quote_path(p) for p in paths[:3]) + (f" (+{len(paths) - 3} more)" if len(paths) > 3 else "")
    release = f"{target.distribution or target.package} {target.version}" if target.version else "the installed release"
    command = restore_command(target, paths)
    if command is not None:
        text = f"`{command}` puts back {release}'s own {what}"
    else:
        text = f"restore {what} from {release}'s own files (reinstall the package, or check the file out again)"
    if undoes:
        text += f" (so {', '.join(undoes)} must be applied again: it puts back their files too)"
    return text + "".join(f", then `{step}`" for step in then)


def record_differences(target: Target, paths: Iterable[str]) -> list:
    """The files among ``paths`` of a wheel install that are not RECORD's (install/record.verify): what
    apply refuses as "baseline not pristine" and audit counts; [] for an install without RECORD."""
    if target.kind != "wheel" or target.dist_info is None:
        return []
    from vllm_hotfix.install.record import read_record, verify

    return verify(target.root, read_record(target.dist_info), sorted(paths))


def dirty_lines(target: Target, paths: Iterable[str]) -> dict[str, str]:
    """The files among ``paths`` of a checkout that git status calls modified: path -> the problem."""
    if target.git is None:
        return {}
    top = target.git.root
    touched = {os.path.relpath(Path(target.root) / p, top): p for p in paths}
    return {touched[line[3:]]: f"{top}: {line[3:]} is modified (git status: {line[:2].strip()})"
            for line in target.git.dirty if line[3:] in touched}


def not_pristine(target: Target, paths: Iterable[str]) -> set[str]:
    """The paths apply would refuse as "baseline not pristine" (RECORD for a wheel, git status for a
    checkout): status words them ``changed``, never ``baseline`` (one rule for status, audit and apply)."""
    paths = sorted(paths)
    return {d.path for d in record_differences(target, paths)} | set(dirty_lines(target, paths))

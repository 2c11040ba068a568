"""The history line of one transaction (who, when, what, with which outcome and fingerprint), built by
the transaction runner from the change it commits, and written by the same commit (txn/history.py).
Reading it back is `hotfix log` (``targets_history``)."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_hotfix_guard.core.fingerprint import Entry as FingerprintEntry, fingerprint
from vllm_hotfix_guard.errors import HotfixError
from vllm_hotfix.install.tree import Tree
from vllm_hotfix.txn import history
from vllm_hotfix_guard.txn.state import TargetState, now

if TYPE_CHECKING:
    from vllm_hotfix_guard.core.hunk_apply import Plan


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """What a transaction does, in the caller's words: history.jsonl's outcome, hotfix and version."""

    outcome: str            # one of txn.history.OUTCOMES
    hotfix: str
    version: int | str
    detail: str = ""


# The options whose value is a file or directory (tests/test_help.py checks every click.Path option of
# the CLI is here); ``--checkout`` takes DIST=DIR, ``--python`` a path only when it holds a slash.
PATH_OPTIONS = frozenset({
    "--add-patch", "--base", "--build-dist", "--bundle-dir", "--ca", "--catalog", "--chain", "--checkout", "--confirm", "--export-dir", "--file", "--key", "--lock",
    "--oci", "--out", "--override", "--password-file", "--patch", "--patch-file", "--python", "--repo", "--root", "--to",
    "--trust", "--upstream-repo", "--wheel",
})


def command_line(argv: list[str] | None = None, cwd: str | None = None) -> str:
    """The command that made the change, as a user would type it again (``hotfix ...``) from any
    directory: a relative path given to a path option (``--catalog ./my-catalog``) is made absolute
    against the working directory ``cwd`` (default: this process's)."""
    argv = list(sys.argv if argv is None else argv)
    first = os.path.basename(argv[0]) if argv else "hotfix"
    if first in ("__main__.py", "hotfix", "-m", "-c") or first.startswith("vllm_hotfix"):
        first = "hotfix"
    words, option = [], None
    for word in argv[1:]:
        if option is not None:
            words.append(absolute_value(option, word, cwd))
            option = None
        elif word.startswith("--") and "=" in word and word.split("=", 1)[0] in PATH_OPTIONS:
            name, value = word.split("=", 1)
            words.append(f"{name}={absolute_value(name, value, cwd)}")
        else:
            option = word if word in PATH_OPTIONS else None
            words.append(word)
    return shlex.join([first, *words])


def absolute_value(option: str, value: str, cwd: str | None = None) -> str:
    """``value`` of the path option ``option`` made absolute (``--checkout``: its DIR; ``--python``: a path
    or a venv directory here, never a name looked up on PATH such as ``python3``)."""
    prefix, cwd = "", cwd or os.getcwd()
    if option == "--checkout" and "=" in value:
        prefix, value = value.split("=", 1)
        prefix += "="
    if not value or os.path.isabs(value):
        return prefix + value
    if option == "--python" and "/" not in value and not os.path.exists(os.path.join(cwd, value)):
        return value
    return prefix + os.path.normpath(os.path.join(cwd, value))


def _user() -> tuple[str, int, str | None]:
    uid = os.geteuid()
    try:
        import pwd

        name = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        name = f"uid {uid}"
    return name, uid, os.environ.get("SUDO_USER") or None


def series_fingerprint(state: TargetState, plan: Plan, tree: Tree) -> str:
    """The fingerprint `status` prints for ``state``'s recorded series once ``plan`` is written: each
    touched file holds the top of its series (what the plan writes, the same transaction's record says),
    every other file what it holds now."""
    from vllm_hotfix.flow.plan import flatten

    top: dict[str, str | None] = {}
    for recorded in state.hotfixes.values():
        for file in recorded.files:
            top[file.path] = file.after_sha256
    touched = {path for path, _, _ in flatten(plan)}
    read: dict[str, str | None] = {}

    def now_sha(path: str) -> str | None:
        if path in touched:
            return top.get(path)
        if path not in read:
            import hashlib

            try:
                found = tree.read(path)
            except HotfixError:
                found = None
            read[path] = hashlib.sha256(found.data).hexdigest() if found is not None else None
        return read[path]

    target = state.target
    return fingerprint(FingerprintEntry(h.id, h.version, target.get("distribution"), target.get("version"),
                                        tuple((f.path, now_sha(f.path)) for f in h.files))
                       for h in state.hotfixes.values())


def entry(event: Event, state: TargetState, plan: Plan, tree: Tree, root: str) -> history.Entry:
    """The line of ``event``: the record after it (``state``) and what it writes (``plan``)."""
    user, uid, sudo_user = _user()
    target = state.target
    return history.Entry(
        time=now(), user=user, uid=uid, sudo_user=sudo_user, host=os.uname().nodename, pid=os.getpid(),
        command=command_line(), outcome=event.outcome, hotfix=event.hotfix, version=event.version,
        fingerprint=series_fingerprint(state, plan, tree), series=tuple(state.hotfixes), files=len(plan.edits),
        root=str(root), distribution=target.get("distribution"), installed_version=target.get("version"),
        detail=event.detail)


def superseded_detail(outcome: str, hotfix_id: str, old: int | str, new: int | str) -> str:
    """The detail of an upgrade's line (``upgraded from ID@OLD``) or of `rollback --to-version`'s (``back to
    ID@NEW``); ``upgraded_from`` reads the first back."""
    return f"upgraded from {hotfix_id}@{old}" if outcome == "upgraded" else f"back to {hotfix_id}@{new}"


def upgraded_from(entries: list[history.Entry], hotfix_id: str, version: int | str) -> str | None:
    """The version ``hotfix_id``@``version`` was upgraded from, when the last line that put it in place is
    that upgrade (``superseded_detail``); None otherwise (applied afresh, adopted, no history)."""
    last = next((e for e in reversed(entries) if e.hotfix == hotfix_id and e.outcome != "forgotten"), None)
    prefix = superseded_detail("upgraded", hotfix_id, "", "")
    if last is None or last.outcome != "upgraded" or str(last.version) != str(version) or \
            not last.detail.startswith(prefix):
        return None
    return last.detail[len(prefix):].split(";", 1)[0].strip() or None


def histories(*, python: str | None, root, everything: bool, catalogs=()) -> list[tuple[str, list[history.Entry]]]:
    """(target root, its entries oldest first) for every target of this `--python` / `--root`, or of the
    whole state directory (``everything``); InvalidInput (exit 8) names a broken file or line."""
    from vllm_hotfix_guard.paths import TargetDir, all_target_dirs

    if everything:
        found = []
        for tdir in all_target_dirs():
            entries = history.read_history(tdir)
            try:
                named = TargetState.load(tdir.directory).target.get("root")
            except HotfixError:
                named = None
            found.append((named or (entries[-1].root if entries else str(tdir.directory)), entries))
        return found
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.flow.resolve import Resolver

    resolver = Resolver(python, root)
    catalog = Catalog.load(catalogs) if root is None else None
    return [(str(t.root), history.read_history(TargetDir.of(t.root))) for t in resolver.targets(catalog)]

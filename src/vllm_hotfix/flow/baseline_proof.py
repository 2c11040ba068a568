"""Proving a target's files are its release's own before a hotfix is planned on them (``prove_baseline``,
``prove_bytes_pristine``, ``prove_files_pristine``: the record, the package RECORD or git), and checking
the files after the write (``check_after``). No writes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from vllm_hotfix_guard.errors import HotfixError, Refused
from vllm_hotfix.flow.hotfix import sha256
from vllm_hotfix.flow.series import Series, steps_by_path
from vllm_hotfix.flow.resolve import Resolver, target_option
from vllm_hotfix.install.locate import Target
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.output import note, quote_path
from vllm_hotfix.flow.plan import Proposal
from vllm_hotfix.flow.restore import dirty_lines, record_differences
from vllm_hotfix_guard.txn.state import TargetState

if TYPE_CHECKING:  # types only: a raw --patch apply never loads the catalog (packaging costs 25 ms)
    from vllm_hotfix.catalog.model import TargetSpec


def prove_baseline(proposal: Proposal, spec: TargetSpec | None, state: TargetState | None = None,
                   tree: Tree | None = None) -> None:
    """The files the plan changes are pristine -- RECORD (wheels) or git (checkouts), else refuse --
    or, for files the series below it touches, their pristine bytes (derived from the series, every
    step checked against its recorded patch) are: the baseline is "pristine + the recorded series".
    ``tree``: the files the plan was made on (a group's member: with the members before it written)."""
    target = proposal.target
    old_paths = {f.path: f for f in proposal.superseded.files} if proposal.superseded else {}
    tree = tree if tree is not None else Tree(target.root)
    for path, recorded in old_paths.items():
        found = tree.read(path)
        if sha256(found.data if found else None) != recorded.after_sha256:
            raise Refused(f"{path}: changed since {proposal.hotfix.id}@{proposal.superseded.version} was applied",
                          hint=f"see `hotfix status {target_option(target)}`; restore the file before upgrading")
    in_series = proposal.in_series if state is not None else frozenset()
    recorded = steps_by_path(state) if state is not None else {}  # the series' own changes are no dirt
    prove_files_pristine(target, spec, [p for p in proposal.baseline if p not in old_paths and p not in in_series],
                         series_paths=recorded)
    if in_series:
        prove_bytes_pristine(target, spec, Series(state, tree).pristine(sorted(in_series)))


def glob_escape(path: str) -> str:
    """A path as an fnmatch pattern matching only itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def prove_bytes_pristine(target: Target, spec: TargetSpec | None, pristine: dict[str, bytes | None]) -> None:
    """The bytes each path had before the series are the release's (RECORD) or HEAD's (git)."""
    if target.kind == "wheel" and target.dist_info is not None:
        from vllm_hotfix.install.record import read_record, verify_bytes

        differences = verify_bytes(read_record(target.dist_info), pristine)
        if differences:
            d = differences[0]
            raise Refused(f"baseline not pristine: {d.path}: the series on it started from other bytes than "
                          f"RECORD's ({d.kind})", hint=f"see `hotfix status {target_option(target)}`; reinstall the package and "
                                           "apply the series again")
    elif target.git is not None:
        from vllm_hotfix.install import git as gitmod

        top = target.git.root
        rel = {path: os.path.relpath(Path(target.root) / path, top) for path in pristine}
        at_head = gitmod.head_blobs(top, rel.values())
        for path, data in pristine.items():
            wanted = None if data is None else gitmod.blob_id(data)
            if at_head.get(rel[path]) != wanted:
                raise Refused(f"baseline not pristine: {path}: the series on it started from other bytes than HEAD's",
                              hint=f"see `hotfix status {target_option(target)}`; restore the checkout and apply the "
                                   "series again")
    else:
        _unproven(target)


def _unproven(target: Target) -> None:
    """No RECORD and no git state to prove a baseline with: a note, unless git's state could not be read
    because another user owns the checkout (git's dubious ownership): then refused (exit 3), never
    written on unproven."""
    from vllm_hotfix_guard.install.facts import find_work_tree
    from vllm_hotfix_guard.install.version import checkout_owner_problem

    top = find_work_tree(target.root) if target.kind == "git" else None
    problem = checkout_owner_problem(top) if top is not None else None
    if problem is not None:
        raise Refused(f"{problem}; the baseline cannot be proven", hint=f"run hotfix as the user who owns {top}, "
                      f"or give it to this user (chown -R)")
    note(f"{target.root}: a {target.kind} install with no RECORD or git: the baseline cannot be proven")


def prove_files_pristine(target: Target, spec: TargetSpec | None, paths: Iterable[str],
                         series_paths: Iterable[str] = ()) -> None:
    """``paths`` (relative to the target root; absent ones are about to be created) are pristine:
    RECORD (wheels) or git (checkouts), else refuse. In a checkout that must be clean, the files the
    recorded series changed (``series_paths``) are allowed to be modified."""
    paths = sorted(paths)
    if target.kind == "wheel" and target.dist_info is not None:
        differences = record_differences(target, paths)
        if differences:
            d = differences[0]
            why = {"digest": "digest differs from RECORD", "size": "size differs from RECORD",
                   "missing": "missing", "unrecorded": "not listed in RECORD", "symlink": "a symbolic link where pip installed a file",
                   "not-a-file": "not a regular file"}.get(d.kind, d.kind)
            more = f" (+{len(differences) - 1} more)" if len(differences) > 1 else ""
            raise Refused(f"baseline not pristine: {quote_path(d.path)} ({why}){more}",
                          hint=f"reinstall it: pip install --force-reinstall --no-deps "
                               f"{target.distribution}=={target.version}; `hotfix audit {target.package}` lists all")
    elif target.git is not None:
        from vllm_hotfix.install import git as gitmod

        rev = None
        clean = False
        if spec is not None and spec.git is not None:
            rev = spec.git.rev
            clean = spec.git.clean
        top = target.git.root
        mine = tuple(glob_escape(os.path.relpath(Path(target.root) / p, top)) for p in series_paths)
        problems = gitmod.check_baseline(target.root, rev, allow=mine if clean else ("*",))
        problems += list(dirty_lines(target, paths).values())
        if problems:
            raise Refused(f"baseline not pristine: {problems[0]}",
                          hint="restore the checkout (git checkout -- FILE / git stash) and retry")
    else:
        _unproven(target)


def check_after(proposal: Proposal, spec: TargetSpec | None) -> None:
    """Post-apply checks: the manifest's text checks, and the package still resolves to the patched files."""
    target = proposal.target
    tree = Tree(target.root)
    manifest = proposal.hotfix.manifest
    if manifest is not None:
        from vllm_hotfix.catalog.model import failed_check  # a raw --patch apply never loads the catalog

        problem = failed_check(manifest, tree.read)
        if problem:
            raise Refused(problem)
    package_rel = os.path.relpath(target.package_dir, target.root)
    touched = [p for p in proposal.after if p == package_rel or p.startswith(package_rel.rstrip("/") + "/")]
    if not touched and package_rel != ".":
        raise Refused(f"{proposal.hotfix.id}: none of the changed files is inside {target.package_dir}, "
                      f"the {target.package} that is loaded")
    if target.python is not None:
        again = Resolver(target.python).package(target.package)  # a fresh resolution, the one every command uses
        if os.path.realpath(again.package_dir) != os.path.realpath(target.package_dir):
            raise Refused(f"{target.package} now resolves to {again.package_dir}, not the patched {target.package_dir}",
                          hint=f"`hotfix where {target.package} --python {target.python} --import` shows why")
    else:
        _warn_if_checkout_not_loaded(target)


def _warn_if_checkout_not_loaded(target: Target) -> None:
    """A --root checkout is only in effect if the server's interpreter imports it: say what this one does."""
    try:
        loaded = Resolver().package(target.package)
    except HotfixError:
        note(f"cannot tell from here which {target.package} the server loads; check with "
             f"`hotfix where {target.package} --python <the server's python> --import`")
        return
    root = os.path.realpath(target.root)
    if os.path.commonpath([root, os.path.realpath(loaded.package_dir)]) != root:
        note(f"WARNING: this interpreter loads {target.package} from {loaded.package_dir}, not from the patched "
             f"checkout {target.root}; make sure the server imports the checkout "
             f"(`hotfix where {target.package} --python <the server's python> --import`)")

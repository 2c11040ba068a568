"""Planning a hotfix on a target's files, proving the baseline, and the post-apply checks. No writes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from vllm_hotfix.core.apply import FileEdit, Plan, detect, plan_patch
from vllm_hotfix.core.diff import Patch, reverse_patch
from vllm_hotfix.core.verdict import DRIFTED, LOST, FileCheck, check_file, files_verdict, same_release
from vllm_hotfix.errors import DoesNotApply, HotfixError, Refused
from vllm_hotfix.flow.hotfix import Hotfix, recorded_series, sha256
from vllm_hotfix.flow.resolve import target_option
from vllm_hotfix.install.locate import Target, locate_package
from vllm_hotfix.install.tree import Tree
from vllm_hotfix.output import note
from vllm_hotfix.txn.state import RecordedFile, RecordedHotfix, TargetState

if TYPE_CHECKING:  # types only: a raw --patch apply never loads the catalog (packaging costs 25 ms)
    from vllm_hotfix.catalog.model import TargetSpec


@dataclass(frozen=True)
class Proposal:
    """A hotfix, the target it is for, and the plan that applies it there."""

    hotfix: Hotfix
    target: Target
    plan: Plan
    already: bool  # the series is in the files already; plan is then its reverse (unused)
    baseline: dict[str, bytes | None]  # path -> bytes before any version of this hotfix
    superseded: RecordedHotfix | None = None

    @property
    def after(self) -> dict[str, bytes | None]:
        result: dict[str, bytes | None] = {}
        for edit in self.plan.edits:
            if edit.action == "rename":
                result[edit.old_path] = None
            result[edit.path] = edit.after
        return result

    def recorded_files(self) -> tuple[RecordedFile, ...]:
        if self.already:
            return tuple(RecordedFile(p, sha256(after), sha256(before))
                         for p, before, after in _flatten(self.plan))
        after = self.after
        return tuple(RecordedFile(p, sha256(self.baseline.get(p)), sha256(after[p]))
                     for p in after if self.baseline.get(p) != after[p])


def _flatten(plan: Plan) -> list[tuple[str, bytes | None, bytes | None]]:
    """(path, before, after) per path; a rename is its source removed plus its destination created."""
    out = []
    for edit in plan.edits:
        if edit.action == "rename":
            out.append((edit.old_path, edit.before, None))
            out.append((edit.path, None, edit.after))
        else:
            out.append((edit.path, edit.before, edit.after))
    return out


def _same_version(a: int | str, b: int | str) -> bool:
    from vllm_hotfix.catalog.index import same_version  # here: only a record needs it

    return same_version(a, b)


def _supersedes(hotfix: Hotfix, recorded: RecordedHotfix) -> bool:
    return hotfix.manifest is not None and any(_same_version(recorded.version, v) for v in hotfix.manifest.supersedes)


def check_record(recorded: RecordedHotfix, tree: Tree) -> list[FileCheck]:
    """Each recorded file against the bytes the hotfix wrote and the baseline: the input of the verdict."""
    checks = []
    for f in recorded.files:
        found = tree.read(f.path)
        checks.append(check_file(f.path, sha256(found.data if found else None), f.after_sha256, f.before_sha256,
                                 str(Path(tree.root) / f.path)))
    return checks


def release_changed(was: str | None, target: Target) -> bool:
    """The package is another release than the one the record was made on (pip install, image rebuild)."""
    return bool(target.version and was and not same_release(was, target.version))


def judge_record(state: TargetState, recorded: RecordedHotfix, target: Target, tree: Tree) -> tuple[str, str]:
    """The one verdict on a recorded hotfix (apply and status both ask this): LOST when the package was
    changed to another release under the record (pip install, image rebuild), else core.verdict's rule
    on the recorded files."""
    was = state.target.get("version")
    if release_changed(was, target):
        return LOST, (f"{target.distribution or target.package} was changed from {was} to {target.version} under "
                      f"the record (pip install / image rebuild): the hotfix applied to {was} is not in effect")
    return files_verdict(check_record(recorded, tree))


def refuse_drifted(hotfix_id: str, detail: str, target: Target) -> Refused:
    return Refused(f"{hotfix_id} is drifted on {target.root}: {detail}",
                   hint=f"restore those files (reinstall the package / git checkout, or `hotfix rollback {hotfix_id} "
                        f"{target_option(target)}` when only baseline files differ), then apply again")


def propose(hotfix: Hotfix, target: Target, state: TargetState, tree: Tree | None = None) -> Proposal:
    """Plan the series on the current files: forward, 'already applied', or an upgrade in one plan.

    A recorded hotfix is judged by the same verdict as `hotfix status`: applied -> nothing to do,
    drifted -> refused (exit 3), lost -> planned afresh like a first apply."""
    tree = tree if tree is not None else Tree(target.root)
    recorded = state.hotfixes.get(hotfix.id)
    series = hotfix.series
    if recorded is not None:
        word, detail = judge_record(state, recorded, target, tree)
        if word == DRIFTED:
            raise refuse_drifted(hotfix.id, detail, target)
        if word == LOST:
            recorded = None  # every file is at its baseline: plan as a first apply, the new record replaces it
    if recorded is not None and not _same_version(recorded.version, hotfix.version):
        if not _supersedes(hotfix, recorded):
            raise Refused(f"{hotfix.id}: version {recorded.version} is applied to {target.root}; "
                          f"{hotfix.ref} does not declare that it supersedes it",
                          hint=f"roll it back first: hotfix rollback {hotfix.id} {target_option(target)}")
        old = recorded_series(state, recorded)
        try:
            undo = plan_patch(old, tree.read, reverse=True)
        except DoesNotApply as exc:
            raise Refused(f"{hotfix.id}: the applied version {recorded.version} cannot be reversed: {exc.message}",
                          hint="the files drifted from what that version wrote; see `hotfix status`") from None
        baseline = {p: after for p, _, after in _flatten(undo)}
        combined = Patch(reverse_patch(old).files + series.files, hotfix.ref)
        plan = plan_patch(combined, tree.read)
        for p, before, _ in _flatten(plan):
            baseline.setdefault(p, before)
        return Proposal(hotfix, target, plan, False, baseline, recorded)
    detection = detect(series, tree.read)
    if detection.state == "conflict":
        raise detection.error
    if detection.state == "applied":
        return Proposal(hotfix, target, detection.plan, True, {p: after for p, _, after in _flatten(detection.plan)})
    return Proposal(hotfix, target, detection.plan, False, {p: before for p, before, _ in _flatten(detection.plan)})


def prove_baseline(proposal: Proposal, spec: TargetSpec | None) -> None:
    """The files the plan changes are pristine: RECORD (wheels) or git (checkouts), else refuse."""
    target = proposal.target
    old_paths = {f.path: f for f in proposal.superseded.files} if proposal.superseded else {}
    tree = Tree(target.root)
    for path, recorded in old_paths.items():
        found = tree.read(path)
        if sha256(found.data if found else None) != recorded.after_sha256:
            raise Refused(f"{path}: changed since {proposal.hotfix.id}@{proposal.superseded.version} was applied",
                          hint="see `hotfix status`; restore the file before upgrading")
    prove_files_pristine(target, spec, [p for p in proposal.baseline if p not in old_paths])


def prove_files_pristine(target: Target, spec: TargetSpec | None, paths: Iterable[str]) -> None:
    """``paths`` (relative to the target root; absent ones are about to be created) are pristine:
    RECORD (wheels) or git (checkouts), else refuse."""
    paths = sorted(paths)
    if target.kind == "wheel" and target.dist_info is not None:
        from vllm_hotfix.install.record import read_record, verify

        differences = verify(target.root, read_record(target.dist_info), paths)
        if differences:
            d = differences[0]
            why = {"digest": "digest differs from RECORD", "size": "size differs from RECORD",
                   "missing": "missing", "unrecorded": "not listed in RECORD"}.get(d.kind, d.kind)
            more = f" (+{len(differences) - 1} more)" if len(differences) > 1 else ""
            raise Refused(f"baseline not pristine: {d.path} ({why}){more}",
                          hint=f"reinstall it: pip install --force-reinstall --no-deps "
                               f"{target.distribution}=={target.version}; `hotfix audit {target.package}` lists all")
    elif target.git is not None:
        from vllm_hotfix.install import git as gitmod

        rev = None
        clean = False
        if spec is not None and spec.git is not None:
            rev = spec.git.rev
            clean = spec.git.clean
        problems = gitmod.check_baseline(target.root, rev, allow=() if clean else ("*",))
        top = target.git.root
        touched = {os.path.relpath(Path(target.root) / p, top) for p in paths}
        problems += [f"{top}: {line[3:]} is modified (git status: {line[:2].strip()})"
                     for line in target.git.dirty if line[3:] in touched]
        if problems:
            raise Refused(f"baseline not pristine: {problems[0]}",
                          hint="restore the checkout (git checkout -- FILE / git stash) and retry")
    else:
        note(f"{target.root}: a {target.kind} install with no RECORD or git: the baseline cannot be proven")


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
        again = locate_package(target.package, target.python)
        if os.path.realpath(again.package_dir) != os.path.realpath(target.package_dir):
            raise Refused(f"{target.package} now resolves to {again.package_dir}, not the patched {target.package_dir}",
                          hint=f"`hotfix where {target.package} --python {target.python} --import` shows why")
    else:
        _warn_if_checkout_not_loaded(target)


def _warn_if_checkout_not_loaded(target: Target) -> None:
    """A --root checkout is only in effect if the server's interpreter imports it: say what this one does."""
    try:
        loaded = locate_package(target.package, None)
    except HotfixError:
        note(f"cannot tell from here which {target.package} the server loads; check with "
             f"`hotfix where {target.package} --python <the server's python> --import`")
        return
    root = os.path.realpath(target.root)
    if os.path.commonpath([root, os.path.realpath(loaded.package_dir)]) != root:
        note(f"WARNING: this interpreter loads {target.package} from {loaded.package_dir}, not from the patched "
             f"checkout {target.root}; make sure the server imports the checkout "
             f"(`hotfix where {target.package} --python <the server's python> --import`)")


def invert(plan: Plan) -> Plan:
    """The plan that puts back what ``plan`` wrote (used when a post-apply check fails)."""
    edits = []
    for e in reversed(plan.edits):
        action = {"create": "delete", "delete": "create"}.get(e.action, e.action)
        old_mode = None if e.new_mode is None and e.action != "delete" else e.old_mode
        edits.append(FileEdit(
            e.old_path if e.action == "rename" else e.path, action, e.path if e.action == "rename" else None,
            e.after, e.before, e.new_mode, None if old_mode is None else old_mode & 0o777, (),
        ))
    return Plan(tuple(edits), not plan.reverse)

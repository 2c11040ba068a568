"""The product flow behind apply, status, verify and rollback, so the commands stay thin.

resolve target -> applicability (range, fixed upstream, preconditions) -> load + pin-check patches ->
plan the series -> prove the baseline -> lock, recover, back up, commit -> post-apply checks -> record.
A dry run goes through the same functions and stops before ``commit``. Status is decided from the
files: recorded hashes when there is a record, else whether the series plans forward or in reverse.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from vllm_hotfix import paths
from vllm_hotfix.catalog import Catalog, same_version
from vllm_hotfix.core.apply import FileEdit, FileState, Plan, detect, plan_patch
from vllm_hotfix.core.diff import Patch, exclude_paths, parse_patch, reverse_patch
from vllm_hotfix.errors import DoesNotApply, FixedUpstream, HotfixError, InvalidInput, Refused, UsageError
from vllm_hotfix.manifest import Manifest, PatchSpec, TargetSpec, check_stats, verify_patch_bytes
from vllm_hotfix.output import note
from vllm_hotfix.state import RecordedFile, RecordedHotfix, TargetState, now
from vllm_hotfix.target.locate import Target, locate_package, locate_root
from vllm_hotfix.target.tree import Tree

APPLIED = "applied"
NOT_APPLIED = "not-applied"
LOST = "lost"
DRIFTED = "drifted"
FIXED_UPSTREAM = "fixed-upstream"
NOT_APPLICABLE = "not-applicable"
UNKNOWN = "unknown"  # cannot be decided here (e.g. a separately distributed patch file was not given)
IN_EFFECT = (APPLIED, FIXED_UPSTREAM)


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


# -- what to apply -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedPatch:
    label: str
    data: bytes  # the exact bytes, as pinned
    strip: int
    exclude: tuple[str, ...]
    patch: Patch  # parsed, excludes applied


@dataclass(frozen=True)
class Hotfix:
    """A catalog manifest or an ad-hoc diff, its patch bytes loaded and checked against their pins."""

    id: str
    version: int | str
    source: str  # 'catalog' | 'adhoc'
    patches: tuple[LoadedPatch, ...]
    manifest: Manifest | None = None
    package: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}" if self.source == "catalog" else self.id

    @property
    def series(self) -> Patch:
        """All patches as one: the planner chains several file patches of one path in order."""
        return Patch(tuple(f for p in self.patches for f in p.patch.files), self.ref)


def load_patch_bytes(data: bytes, *, label: str, strip: int, exclude: Sequence[str] = (),
                     parsed: Patch | None = None) -> LoadedPatch:
    patch = parsed if parsed is not None else parse_patch(data, strip=strip, source=label)
    if exclude:
        patch = exclude_paths(patch, exclude)
    return LoadedPatch(label, data, strip, tuple(exclude), patch)


def adhoc_hotfix(patch_file: Path, *, hotfix_id: str | None, strip: int, package: str) -> Hotfix:
    try:
        data = Path(patch_file).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{patch_file}: cannot read: {exc.strerror}") from None
    hotfix_id = hotfix_id or Path(patch_file).stem
    loaded = load_patch_bytes(data, label=str(patch_file), strip=strip)
    return Hotfix(hotfix_id, sha256(data)[:12], "adhoc", (loaded,), package=package)


def _manifest_patch_bytes(manifest: Manifest, spec: PatchSpec, patch_files: Sequence[Path],
                          upstream_repo: Path | None, target: Target) -> tuple[str, bytes]:
    if spec.kind == "file":
        path = manifest.patch_path(spec)
        try:
            return str(path), path.read_bytes()
        except OSError as exc:
            raise InvalidInput(f"{path}: cannot read patch: {exc.strerror}") from None
    if spec.kind == "external":
        given = [Path(p) for p in patch_files if Path(p).name == spec.external]
        if not given:
            raise Refused(f"{manifest.ref}: needs the separately distributed patch file {spec.external}",
                          hint=f"get it from {spec.url} and pass --patch-file PATH/{spec.external}")
        try:
            return str(given[0]), given[0].read_bytes()
        except OSError as exc:
            raise InvalidInput(f"{given[0]}: cannot read: {exc.strerror}") from None
    from vllm_hotfix.upstream import load_pinned_commit  # normalised diff, pin checked; GitPython lazily

    return spec.label, load_pinned_commit(spec, upstream_repo=upstream_repo, target_root=target.root)


def catalog_hotfix(manifest: Manifest, target: Target, *, patch_files: Sequence[Path] = (),
                   upstream_repo: Path | None = None) -> Hotfix:
    """Load every patch the manifest picks for the target's version; pins and stats checked first."""
    loaded = []
    for spec in manifest.patches_for(target.version):
        label, data = _manifest_patch_bytes(manifest, spec, patch_files, upstream_repo, target)
        loaded.append(checked_patch(spec, data, label))
    return Hotfix(manifest.id, manifest.version, "catalog", tuple(loaded), manifest, target.package)


def checked_patch(spec: PatchSpec, data: bytes, label: str) -> LoadedPatch:
    """A manifest patch's bytes checked against its pins and declared stats, parsed, excludes applied."""
    verify_patch_bytes(spec, data, label)
    whole = parse_patch(data, strip=spec.strip, source=label)
    check_stats(spec, whole.stats, label)  # declared stats describe the pinned file, before excludes
    return load_patch_bytes(data, label=label, strip=spec.strip, exclude=spec.exclude, parsed=whole)


def recorded_series(state: TargetState, recorded: RecordedHotfix) -> Patch:
    """The exact patches a record says were applied, parsed as they were then."""
    files = []
    for index, rel in enumerate(recorded.patches):
        data = state.read_patch(rel)
        if data is None:
            raise Refused(f"{state.directory / rel}: the recorded patch of {recorded.id} is gone",
                          hint="restore the state directory from a backup or reinstall the package")
        strip = recorded.strip[index] if index < len(recorded.strip) else 1
        exclude = recorded.exclude[index] if index < len(recorded.exclude) else ()
        files.extend(load_patch_bytes(data, label=str(state.directory / rel), strip=strip, exclude=exclude).patch.files)
    return Patch(tuple(files), recorded.id)


# -- which target, and does the hotfix belong there ----------------------------------------------


def target_option(target: Target) -> str:
    """How to name this target again on a command line (for advice lines)."""
    if target.python is not None:
        return f"--python {target.python}"
    return f"--root {target.root}"


def target_summary(target: Target) -> dict:
    """The target as state.json records it and `apply --json` reports it."""
    return {"root": str(target.root), "package": target.package, "distribution": target.distribution,
            "version": target.version, "kind": target.kind, "python": target.python}


def resolve_manifest_target(manifest: Manifest, *, python: str | None, root: Path | None,
                            cache: dict | None = None) -> tuple[Target, TargetSpec | None]:
    """The target the manifest is about, and the manifest target entry that matches it (None: none)."""
    cache = {} if cache is None else cache
    if root is not None:
        specs = [s for s in manifest.targets if (Path(root) / s.package).is_dir()] or list(manifest.targets)
        key = ("root", str(root), specs[0].package)
        if key not in cache:
            cache[key] = locate_root(root, specs[0].package)
        target = cache[key]
        if target.distribution is None:  # a checkout without metadata: the package name decides
            return target, specs[0] if (Path(root) / specs[0].package).is_dir() else None
        return target, manifest.target_for(target.distribution)
    error: HotfixError | None = None
    for spec in manifest.targets:
        key = ("python", python, spec.package)
        try:
            if key not in cache:
                cache[key] = locate_package(spec.package, python)
        except Refused as exc:
            error = exc
            continue
        target = cache[key]
        return target, manifest.target_for(target.distribution) if target.distribution else None
    assert error is not None
    raise error


@dataclass(frozen=True)
class Verdict:
    state: str  # FIXED_UPSTREAM | NOT_APPLICABLE
    message: str
    advice: str | None = None


def _describe_target(target: Target) -> str:
    name = target.distribution or target.package
    return f"{name} {target.version}" if target.version else f"{name} at {target.root}"


def applicability(manifest: Manifest, spec: TargetSpec | None, target: Target) -> Verdict | None:
    """Why this hotfix cannot go on this target (fixed upstream / outside the range), or None."""
    where = _describe_target(target)
    if spec is None:
        wanted = ", ".join(t.describe() for t in manifest.targets)
        return Verdict(NOT_APPLICABLE, f"not applicable: {where} is not a target of {manifest.ref} ({wanted})")

    def commit_checker(commit: str, repo: str | None) -> bool:
        from vllm_hotfix.target import git as gitmod

        return target.git is not None and gitmod.has_commit(target.root, commit) and gitmod.is_ancestor(target.root, commit)

    if manifest.is_fixed_in(target.version, commit_checker):
        return Verdict(FIXED_UPSTREAM, f"{manifest.id}: {where} already contains the upstream fix "
                                       f"({manifest.fixed_in.describe()}); nothing to apply",
                       "nothing to do; remove this hotfix from your deployment scripts")
    if target.version is None and spec.git is not None and target.git is not None:
        from vllm_hotfix.target import git as gitmod

        wrong_head = gitmod.check_baseline(target.root, spec.git.rev, allow=("*",))
        if wrong_head:
            return Verdict(NOT_APPLICABLE, f"not applicable: {wrong_head[0]}")
    if spec.versions is not None:
        if target.version is None and spec.git is None:
            return Verdict(NOT_APPLICABLE, f"not applicable: the version of {where} is unknown; "
                                           f"{manifest.ref} needs {spec.distribution} {spec.versions}")
        if target.version is not None and not spec.contains(target.version):
            return Verdict(NOT_APPLICABLE, f"not applicable: {where} is outside {spec.versions}")
    return None


def check_applicable(manifest: Manifest, spec: TargetSpec | None, target: Target) -> None:
    verdict = applicability(manifest, spec, target)
    if verdict is None:
        return
    if verdict.state == FIXED_UPSTREAM:
        raise FixedUpstream(verdict.message, hint=verdict.advice)
    raise Refused(f"{manifest.ref}: {verdict.message}", hint="`hotfix show " + manifest.id + "` lists its targets")


def parse_checkouts(values: Sequence[str]) -> dict[str, Path]:
    """``--checkout DIST=DIR`` options as a mapping."""
    checkouts: dict[str, Path] = {}
    for value in values:
        dist, sep, directory = value.partition("=")
        if not sep or not dist or not directory:
            raise UsageError(f"--checkout {value!r}: expected DIST=DIR, e.g. vllm=/vllm-workspace/vllm")
        checkouts[dist.strip()] = Path(directory)
    return checkouts


def check_requires(manifest: Manifest, checkouts: dict[str, Path] | None = None) -> None:
    """Preconditions on other checkouts, found via ``--checkout DIST=DIR`` or at their ``root_hint``."""
    from vllm_hotfix.target import git as gitmod

    for index, requirement in enumerate(manifest.requires):
        what = f"{manifest.ref}: requires[{index}] ({requirement.distribution} {requirement.git.describe()})"
        given = (checkouts or {}).get(requirement.distribution)
        where = given or (Path(requirement.root_hint) if requirement.root_hint else None)
        if where is None or not where.is_dir():
            raise Refused(f"{what}: no {requirement.distribution} checkout at {where or '(no root_hint)'}",
                          hint=f"pass --checkout {requirement.distribution}=DIR with the checkout's directory")
        problems = gitmod.check_baseline(where, requirement.git.rev, allow=() if requirement.git.clean else ("*",))
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            raise Refused(f"{what}: {problems[0]}{more}", hint="restore that checkout (git checkout / git stash) and retry")


# -- planning ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
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


def _supersedes(hotfix: Hotfix, recorded: RecordedHotfix) -> bool:
    return hotfix.manifest is not None and any(same_version(recorded.version, v) for v in hotfix.manifest.supersedes)


def propose(hotfix: Hotfix, target: Target, state: TargetState) -> Proposal:
    """Plan the series on the current files: forward, 'already applied', or an upgrade in one plan."""
    tree = Tree(target.root)
    recorded = state.hotfixes.get(hotfix.id)
    series = hotfix.series
    if recorded is not None and not same_version(recorded.version, hotfix.version):
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
        from vllm_hotfix.target.record import read_record, verify

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
        from vllm_hotfix.target import git as gitmod

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
    for index, check in enumerate(manifest.checks if manifest else ()):
        found = tree.read(check.file)
        text = found.data.decode("utf-8", "replace") if found else None
        what = f"{manifest.ref}: checks[{index}] {check.file}"
        if text is None:
            raise Refused(f"{what}: file missing after applying")
        if check.contains is not None and check.contains not in text:
            raise Refused(f"{what}: does not contain {check.contains!r} after applying")
        if check.not_contains is not None and check.not_contains in text:
            raise Refused(f"{what}: still contains {check.not_contains!r} after applying")
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


# -- writing -------------------------------------------------------------------------------------


def _store_backups(state: TargetState, hotfix_id: str, baseline: dict[str, bytes | None]) -> str:
    from vllm_hotfix.txn.atomic import atomic_write

    rel = f"backups/{hotfix_id}"
    for path, data in baseline.items():
        if data is not None:
            dest = state.directory / rel / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, data)
    return rel


def record(state: TargetState, proposal: Proposal, backups: str) -> RecordedHotfix:
    hotfix, target = proposal.hotfix, proposal.target
    stored = tuple(state.store_patch(hotfix.id, i, p.data, hotfix.version) for i, p in enumerate(hotfix.patches))
    entry = RecordedHotfix(
        id=hotfix.id, version=hotfix.version, applied_at=now(), source=hotfix.source, patches=stored,
        files=proposal.recorded_files(), strip=tuple(p.strip for p in hotfix.patches),
        exclude=tuple(p.exclude for p in hotfix.patches), backups=backups, package=hotfix.package,
    )
    state.target = target_summary(target)
    state.hotfixes[hotfix.id] = entry
    state.save()
    for rel in proposal.superseded.patches if proposal.superseded else ():
        if rel not in stored:
            (state.directory / rel).unlink(missing_ok=True)
    return entry


@dataclass(frozen=True)
class ApplyOutcome:
    proposal: Proposal
    dry_run: bool

    @property
    def already(self) -> bool:
        return self.proposal.already


def apply(hotfix: Hotfix, target: Target, spec: TargetSpec | None, *, dry_run: bool,
          lock_timeout: float | None = None) -> ApplyOutcome:
    """Plan (and unless ``dry_run``) apply ``hotfix`` all-or-nothing, then record it."""
    from vllm_hotfix.txn.journal import JOURNAL, commit, recover_target
    from vllm_hotfix.txn.lock import DEFAULT_TIMEOUT, target_lock

    state_dir = paths.target_state_dir(target.root)
    if dry_run:
        if (paths.journal_dir(state_dir) / JOURNAL).exists():
            note(f"an interrupted apply on {target.root} was not recovered yet; the next hotfix command will")
        proposal = propose(hotfix, target, TargetState.load(state_dir))
        if not proposal.already:
            prove_baseline(proposal, spec)
        return ApplyOutcome(proposal, True)
    with target_lock(state_dir, DEFAULT_TIMEOUT if lock_timeout is None else lock_timeout):
        recover_target(target.root)
        state = TargetState.load(state_dir)
        proposal = propose(hotfix, target, state)
        if proposal.already:
            if hotfix.id not in state.hotfixes:  # applied by hand, or killed between commit and record
                record(state, proposal, _store_backups(state, hotfix.id, proposal.baseline))
            return ApplyOutcome(proposal, False)
        prove_baseline(proposal, spec)
        backups = _store_backups(state, hotfix.id, proposal.baseline)
        journal_dir = paths.journal_dir(state_dir)
        commit(target.root, proposal.plan, journal_dir=journal_dir)
        try:
            check_after(proposal, spec)
        except HotfixError as failed:
            commit(target.root, invert(proposal.plan), journal_dir=journal_dir)
            raise Refused(f"post-apply check failed, every file was restored: {failed.message}",
                          hint=failed.hint) from None
        try:
            record(state, proposal, backups)
        except BaseException:  # an unrecorded apply could not be rolled back later: undo it now
            commit(target.root, invert(proposal.plan), journal_dir=journal_dir)
            raise
    return ApplyOutcome(proposal, False)


# -- status --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    id: str
    version: int | str | None
    state: str
    target: str  # root or package dir, for people
    detail: str = ""
    advice: str | None = None
    files: tuple[dict, ...] = ()
    recorded: bool = False

    def to_json(self) -> dict:
        return {"id": self.id, "version": self.version, "state": self.state, "target": self.target,
                "recorded": self.recorded, "detail": self.detail, "advice": self.advice, "files": list(self.files)}


def status_from_record(recorded: RecordedHotfix, root: Path, option: str) -> Status:
    """Compare each recorded file with its recorded before/after hash."""
    tree = Tree(root)
    files = []
    for f in recorded.files:
        found = tree.read(f.path)
        current = sha256(found.data if found else None)
        which = "patched" if current == f.after_sha256 else "baseline" if current == f.before_sha256 else "changed"
        files.append({"path": f.path, "state": which, "sha256": current,
                      "after_sha256": f.after_sha256, "before_sha256": f.before_sha256})
    states = {f["state"] for f in files}
    common = dict(id=recorded.id, version=recorded.version, target=str(root), files=tuple(files), recorded=True)
    apply_cmd = f"hotfix apply {recorded.id} {option}" if recorded.source == "catalog" else \
        f"hotfix apply --patch PATCH --id {recorded.id} {option} --package {recorded.package or 'PACKAGE'}"
    if states <= {"patched"}:
        return Status(state=APPLIED, detail=f"{len(files)} file(s) as recorded", **common)
    if states == {"baseline"}:
        return Status(state=LOST, detail="recorded as applied, but every file is back to its baseline "
                                         "(reinstalled or rebuilt?)", advice=f"re-run `{apply_cmd}`", **common)
    odd = [f["path"] for f in files if f["state"] == "changed"] or [f["path"] for f in files if f["state"] == "baseline"]
    kind = "neither baseline nor patched" if any(f["state"] == "changed" for f in files) else "back to baseline while others are patched"
    return Status(state=DRIFTED, detail=f"{', '.join(odd)}: {kind}",
                  advice=f"restore {odd[0]} (reinstall the package or `hotfix rollback {recorded.id} {option}` if only "
                         f"baseline files differ), then `{apply_cmd}`", **common)


def status_from_files(hotfix: Hotfix, target: Target) -> Status:
    """An unrecorded hotfix: does its series plan forward (not applied) or in reverse (applied)?"""
    tree = Tree(target.root)
    common = dict(id=hotfix.id, version=hotfix.version, target=str(target.root))
    option = target_option(target)
    detection = detect(hotfix.series, tree.read)
    if detection.state == "applicable":
        return Status(state=NOT_APPLIED, advice=f"`hotfix apply {hotfix.id} {option}`",
                      files=tuple({"path": p, "state": "baseline"} for p, _, _ in _flatten(detection.plan)), **common)
    if detection.state == "conflict":
        return Status(state=DRIFTED, detail=detection.error.message,
                      advice="the file is neither baseline nor patched: restore it, then apply", **common)
    return Status(state=APPLIED, detail="the files hold the patch, but it is not recorded here (applied by hand?)",
                  files=tuple({"path": p, "state": "patched"} for p, _, _ in _flatten(detection.plan)), **common)


def catalog_status(manifest: Manifest, target: Target, spec: TargetSpec | None, recorded: RecordedHotfix | None,
                   *, patch_files: Sequence[Path] = ()) -> Status:
    verdict = applicability(manifest, spec, target)
    if verdict is not None:
        return Status(manifest.id, manifest.version, verdict.state, str(target.root), verdict.message,
                      verdict.advice, recorded=recorded is not None)
    if recorded is not None:
        found = status_from_record(recorded, target.root, target_option(target))
        if not same_version(recorded.version, manifest.version) and found.state == APPLIED:
            return replace(found, detail=f"version {recorded.version} is applied; the catalog has {manifest.version}",
                           advice=f"upgrade: `hotfix apply {manifest.id} {target_option(target)}`")
        return found
    try:
        hotfix = catalog_hotfix(manifest, target, patch_files=patch_files)
    except HotfixError as exc:
        return Status(manifest.id, manifest.version, UNKNOWN, str(target.root), exc.message, exc.hint)
    return status_from_files(hotfix, target)


def python_roots(python: str | None) -> list[Path]:
    """The sys.path directories of an interpreter (where its recorded targets can be)."""
    import sys

    interpreter = python or sys.executable
    try:
        done = subprocess.run([interpreter, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                              capture_output=True, text=True, timeout=60)
    except (FileNotFoundError, PermissionError):
        raise UsageError(f"--python {interpreter}: no such interpreter") from None
    if done.returncode != 0:
        raise UsageError(f"--python {interpreter}: failed to start ({done.stderr.strip()[:200]})")
    return [Path(p) for p in json.loads(done.stdout) if p and Path(p).is_dir()]


def recorded_states(*, python: str | None, root: Path | None) -> list[TargetState]:
    """Recorded state of every target of this interpreter (or of ``root``)."""
    roots = [Path(root)] if root is not None else python_roots(python)
    found = []
    for r in roots:
        state = TargetState.load(paths.target_state_dir(r))
        if state.hotfixes:
            found.append(state)
    return found


@dataclass
class Survey:
    """status / verify over hotfixes and targets; one Status per (hotfix, target)."""

    python: str | None
    root: Path | None
    catalog: Catalog
    cache: dict = field(default_factory=dict)

    def _option(self, state: TargetState) -> str:
        return f"--root {self.root}" if self.root is not None else f"--python {self.python or state.target.get('python')}"

    def named(self, refs: Iterable[tuple[str, str | None]]) -> list[Status]:
        states = recorded_states(python=self.python, root=self.root)
        out = []
        for hotfix_id, version in refs:
            records = [(s, s.hotfixes[hotfix_id]) for s in states if hotfix_id in s.hotfixes]
            if hotfix_id in self.catalog.ids():
                out.append(self._catalog_one(self.catalog.get(hotfix_id, version), records))
            elif records:
                out.extend(status_from_record(r, Path(s.target.get("root", "")), self._option(s)) for s, r in records)
            else:
                self.catalog.get(hotfix_id)  # raises Refused with a close match
        return out

    def _catalog_one(self, manifest: Manifest, records) -> Status:
        target, spec = resolve_manifest_target(manifest, python=self.python, root=self.root, cache=self.cache)
        recorded = next((r for s, r in records if Path(s.target.get("root", "")) == Path(target.root)), None)
        if recorded is None:
            recorded = TargetState.for_root(target.root).hotfixes.get(manifest.id)
        return catalog_status(manifest, target, spec, recorded)

    def everything(self, *, with_catalog: bool) -> list[Status]:
        states = recorded_states(python=self.python, root=self.root)
        out: list[Status] = []
        seen: set[str] = set()
        for state in states:
            for hotfix_id, recorded in sorted(state.hotfixes.items()):
                seen.add(hotfix_id)
                if recorded.source == "catalog" and hotfix_id in self.catalog.ids():
                    out.append(self._catalog_one(self.catalog.get(hotfix_id), [(state, recorded)]))
                else:
                    out.append(status_from_record(recorded, Path(state.target.get("root", "")), self._option(state)))
        if with_catalog:
            for manifest in self.catalog.latest():
                if manifest.id in seen or manifest.kind == "advisory":  # no patch: nothing to be in effect
                    continue
                try:
                    target, spec = resolve_manifest_target(manifest, python=self.python, root=self.root, cache=self.cache)
                except (Refused, UsageError):
                    continue  # its package is not installed for this interpreter
                if spec is None:
                    continue
                out.append(catalog_status(manifest, target, spec, None))
        return out


# -- rollback ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RollbackOutcome:
    recorded: RecordedHotfix
    plan: Plan
    method: str  # 'backups' | 'reverse' | 'none'
    dry_run: bool


def _rollback_plan(state: TargetState, recorded: RecordedHotfix, root: Path) -> tuple[Plan, str]:
    tree = Tree(root)
    current: dict[str, FileState | None] = {}
    to_restore = []
    for f in recorded.files:
        current[f.path] = found = tree.read(f.path)
        digest = sha256(found.data if found else None)
        if digest == f.before_sha256:
            continue
        if digest != f.after_sha256:
            raise Refused(f"{root / f.path}: neither what {recorded.id} wrote nor the baseline (changed by hand?)",
                          hint="restore it (reinstall the package / git checkout) first; nothing was changed")
        to_restore.append(f)
    desired: dict[str, bytes | None] = {}
    method = "backups"
    for f in to_restore:
        if f.before_sha256 is None:
            desired[f.path] = None
            continue
        backup = state.directory / (recorded.backups or f"backups/{recorded.id}") / f.path
        data = backup.read_bytes() if backup.is_file() else None
        if sha256(data) != f.before_sha256:
            method = "reverse"
            break
        desired[f.path] = data
    if method == "reverse" and to_restore:
        wanted = {f.path for f in to_restore}
        series = recorded_series(state, recorded)
        part = Patch(tuple(fp for fp in series.files if {fp.old_path, fp.new_path} & wanted), series.source)
        undo = plan_patch(part, tree.read, reverse=True)
        desired = {p: after for p, _, after in _flatten(undo) if p in wanted}
        for f in to_restore:
            if sha256(desired.get(f.path)) != f.before_sha256:
                raise Refused(f"{f.path}: reversing the recorded patch does not give the recorded baseline",
                              hint="reinstall the package to restore its baseline")
    edits = []
    for f in to_restore:
        found = current[f.path]
        after = desired[f.path]
        action = "create" if found is None else "delete" if after is None else "modify"
        edits.append(FileEdit(f.path, action, None, found.data if found else None, after,
                              found.mode if found else None, None, ()))
    return Plan(tuple(edits), True), method if edits else "none"


def rollback(state: TargetState, hotfix_id: str, root: Path, *, dry_run: bool) -> RollbackOutcome:
    from vllm_hotfix.txn.journal import commit, recover_target
    from vllm_hotfix.txn.lock import target_lock

    def recorded_or_refuse(s: TargetState) -> RecordedHotfix:
        if hotfix_id not in s.hotfixes:
            known = ", ".join(sorted(s.hotfixes)) or "none"
            raise Refused(f"{hotfix_id}: not recorded as applied to {root} (recorded: {known})",
                          hint="`hotfix status` shows what is applied where")
        return s.hotfixes[hotfix_id]

    if dry_run:
        recorded = recorded_or_refuse(state)
        plan, method = _rollback_plan(state, recorded, root)
        return RollbackOutcome(recorded, plan, method, True)
    with target_lock(state.directory):
        recover_target(root)
        state = TargetState.load(state.directory)
        recorded = recorded_or_refuse(state)
        plan, method = _rollback_plan(state, recorded, root)
        if plan.edits:
            commit(root, plan, journal_dir=paths.journal_dir(state.directory))
        state.forget(hotfix_id)
        state.save()
    return RollbackOutcome(recorded, plan, method, False)


def find_recorded(hotfix_id: str, *, python: str | None, root: Path | None) -> tuple[TargetState, Path]:
    """The target state holding ``hotfix_id`` for this interpreter (or root)."""
    states = recorded_states(python=python, root=root)
    holding = [s for s in states if hotfix_id in s.hotfixes]
    if not holding:
        where = f"--root {root}" if root is not None else (f"--python {python}" if python else "this interpreter")
        raise Refused(f"{hotfix_id}: not recorded as applied for {where}",
                      hint="`hotfix status` shows what is applied where")
    if len(holding) > 1:
        raise UsageError(f"{hotfix_id}: recorded for several targets: "
                         + ", ".join(s.target.get("root", "?") for s in holding), hint="pass --root DIR")
    state = holding[0]
    return state, Path(state.target.get("root") or (root or "."))


"""Applying: a catalog hotfix or an ad-hoc diff on a resolved target, and a raw diff on a `--root`.

Both plan in ``prepare`` (a dry run stops after it) and write through ``transaction.run``, so both are
recorded: `status`, `verify` and `rollback` see every apply.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from vllm_hotfix_guard.core.hunk_apply import Plan, plan_patch
from vllm_hotfix_guard.core.diff import DiffStat, Patch, parse_patch
from vllm_hotfix_guard.errors import DoesNotApply, HotfixError, InvalidInput, Refused
from vllm_hotfix.flow import transaction
from vllm_hotfix.flow.history_line import Event, superseded_detail
from vllm_hotfix.flow.hotfix import Hotfix, read_patch_file, sha256
from vllm_hotfix.flow.parallel_plan import ForkedHalf
from vllm_hotfix.flow.baseline_proof import check_after, prove_baseline, prove_bytes_pristine
from vllm_hotfix.flow.plan import Proposal, flatten, propose, refuse_overlaps, shared_with_series
from vllm_hotfix.flow.series import steps_by_path
from vllm_hotfix.flow.resolve import Resolver, target_summary
from vllm_hotfix.install.locate import Target
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.txn.fsops import parallel
from vllm_hotfix_guard.paths import TargetDir, read_own_file
from vllm_hotfix_guard.txn.state import BACKUP_LIMIT, RecordedFile, RecordedHotfix, TargetState, now

if TYPE_CHECKING:  # types only: a raw --patch apply never loads the catalog (packaging costs 25 ms)
    from vllm_hotfix.catalog.model import TargetSpec


@dataclass(frozen=True)
class ApplyOutcome:
    """What `apply` of a catalog hotfix did (or would do, in a dry run)."""

    proposal: Proposal
    dry_run: bool
    recorded: bool = True  # the record was written (or would be): False for "already applied, nothing to do"
    sealed: bool = False  # already applied, and its record (from before seals) was sealed

    @property
    def already(self) -> bool:
        return self.proposal.already

    @property
    def adopted(self) -> bool:
        """The files already hold its change and it is recorded now (applied by hand, or its record was
        made on another release or commit): no file changed."""
        return self.proposal.already and self.recorded and not self.sealed


def _next_state(state: TargetState, target_doc: dict, entry: RecordedHotfix | None, forget: str | None = None) -> TargetState:
    hotfixes = dict(state.hotfixes)
    if forget is not None:
        hotfixes.pop(forget, None)
    if entry is not None:
        hotfixes[entry.id] = entry
    return TargetState(state.directory, target_doc if entry is not None else dict(state.target), hotfixes)


def _backups(state: TargetState, tree: Tree, hotfix_id: str, baseline: dict[str, bytes | None],
             current: dict[str, bytes | None]) -> dict[str, bytes | str]:
    """What to keep under backups/<id>/: a hard link of the file when it holds the baseline now,
    else the baseline bytes; nothing when a kept backup already holds them."""
    keep: dict[str, bytes | str] = {}
    for path, data in baseline.items():
        if data is None:
            continue
        rel = TargetDir.backup_rel(hotfix_id, path)
        try:  # read as input: a regular file, no symlink followed
            kept = read_own_file(state.directory / rel, limit=BACKUP_LIMIT)
        except (OSError, InvalidInput):
            kept = None
        if kept is not None and sha256(kept) == sha256(data):
            continue
        keep[rel] = path if current.get(path) == data else data
    return keep


def _record(state: TargetState, tree: Tree, *, hotfix_id: str, version, source: str, patches: list[tuple[bytes, int, tuple]],
            files: tuple[RecordedFile, ...], baseline: dict[str, bytes | None], current: dict[str, bytes | None],
            package: str | None, target_doc: dict, applied_under: dict | None = None,
            code: tuple = ()) -> tuple[TargetState, dict[str, bytes | str]]:
    """The record after applying, and the files to keep for it (patch bytes, backups); ``code``: the names
    its Python files' changes touch (flow/codenames.step_names), which the guard checks live."""
    keep: dict[str, bytes | str] = {}
    rels = []
    for index, (data, _, _) in enumerate(patches):
        rel = TargetDir.patch_rel(hotfix_id, index, version)
        rels.append(rel)
        keep[rel] = data
    keep.update(_backups(state, tree, hotfix_id, baseline, current))
    entry = RecordedHotfix(
        id=hotfix_id, version=version, applied_at=now(), source=source, patches=tuple(rels), files=files,
        strip=tuple(p[1] for p in patches), exclude=tuple(p[2] for p in patches), backups=TargetDir.backups_rel(hotfix_id),
        package=package, backup_names="flat", patch_sha256=tuple(sha256(p[0]) for p in patches), **(applied_under or {}),
        code=code,
    )
    return _next_state(state, target_doc, entry), keep


def _sealed(state: TargetState, tree: Tree, hotfix: Hotfix, spec: TargetSpec | None,
            catalog_dir: str | None) -> TargetState | None:
    """The record with its seal and its code names, for a record written before them whose kept patches
    are exactly the bytes this apply loaded (so pinned, for a catalog hotfix): ``propose`` derived its
    series in full. None when it has both already, or its kept patches are other bytes."""
    from dataclasses import replace

    from vllm_hotfix.flow.codenames import names_in

    recorded = state.hotfixes[hotfix.id]
    if (recorded.seal is not None and recorded.code is not None) or len(recorded.patches) != len(hotfix.patches):
        return None
    pins = tuple(sha256(p.data) for p in hotfix.patches)
    if any(sha256(state.read_patch(rel)) != pin for rel, pin in zip(recorded.patches, pins)):
        return None
    fields = applied_under(hotfix, spec, catalog_dir)
    hotfixes = dict(state.hotfixes)
    code = recorded.code if recorded.code is not None else names_in(state, tree, hotfix.id)
    hotfixes[hotfix.id] = replace(recorded, patch_sha256=pins, code=code, **{k: v for k, v in fields.items()
                                                                             if getattr(recorded, k) is None})
    return TargetState(state.directory, dict(state.target), hotfixes)


def _code_of(patch, proposal: Proposal) -> tuple:
    """flow/codenames.step_names of this hotfix's step of each file (adopted: the plan is its reverse)."""
    from vllm_hotfix.flow.codenames import step_names

    if proposal.already:
        return step_names(patch, [(p, after, before) for p, before, after in flatten(proposal.plan)])
    after = proposal.after
    return step_names(patch, [(p, proposal.baseline.get(p), after[p]) for p in after])


def applied_under(hotfix: Hotfix, spec: TargetSpec | None, catalog_dir: str | None) -> dict:
    """What a catalog hotfix's record keeps of its manifest, so that every reader judges it without the
    catalog (txn/judgement: the guard too): the release with the fix, the range, and the catalog directory
    it came from (for the advice lines)."""
    manifest = hotfix.manifest
    if manifest is None:
        return {}
    return {"fixed_in": manifest.fixed_in.version if manifest.fixed_in else None,
            "versions": spec.versions if spec is not None else None, "catalog": catalog_dir}


def hotfix_prepare(hotfix: Hotfix, target: Target, spec: TargetSpec | None, *, catalog=None,
                   catalog_dir: str | None = None, back_to: bool = False, resealed: list | None = None
                   ) -> transaction.Prepare:
    """``apply_hotfix``'s plan and record on the state and files given: its transaction's, or a group member's
    (flow/apply_group). ``resealed`` collects the id when only its record is sealed anew."""
    resealed = resealed if resealed is not None else []

    def prepare(state: TargetState, tree: Tree) -> transaction.Change:
        proposal = propose(hotfix, target, state, tree, catalog=catalog, back_to=back_to)
        if proposal.already and ((hotfix.id in state.hotfixes and not proposal.reset) or proposal.contained_in):
            sealed = _sealed(state, tree, hotfix, spec, catalog_dir) if hotfix.id in state.hotfixes else None
            if sealed is not None:  # a record from before seals / code names, just derived in full: it gets them
                resealed.append(hotfix.id)
                return transaction.Change(Plan((), False), sealed, record_changed=True, result=proposal)
            return transaction.Change(Plan((), False), state, record_changed=False, result=proposal)
        if not proposal.already:
            prove_baseline(proposal, spec, state, tree)
        current = {p: before for p, before, _ in flatten(proposal.plan)}
        if proposal.already:  # applied by hand (or by another tool): adopt it, change no file --
            current = {p: after for p, _, after in flatten(proposal.plan)}  # once what it undoes is pristine
            prove_bytes_pristine(target, spec, proposal.baseline)
        base = TargetState(state.directory, dict(state.target), {}) if proposal.reset else state
        new_state, keep = _record(
            base, tree, hotfix_id=hotfix.id, version=hotfix.version, source=hotfix.source,
            patches=[(p.data, p.strip, p.exclude) for p in hotfix.patches], files=proposal.recorded_files(),
            baseline=proposal.baseline, current=current, package=hotfix.package, target_doc=target_summary(target),
            applied_under=applied_under(hotfix, spec, catalog_dir), code=_code_of(hotfix.series, proposal))
        plan = Plan((), False) if proposal.already else proposal.plan
        outcome = "adopted" if proposal.already else "applied" if proposal.superseded is None else \
            "rolled-back" if back_to else "upgraded"
        detail = (f"{superseded_detail(outcome, hotfix.id, proposal.superseded.version, hotfix.version)}; "
                  if proposal.superseded else "") + (
            f"dropped the records of another release: {', '.join(proposal.dropped)}" if proposal.dropped else "")
        return transaction.Change(plan, new_state, True, keep, proposal,
                                  event=Event(outcome=outcome, hotfix=hotfix.id, detail=detail.rstrip("; "),
                                              version=proposal.superseded.version if back_to else hotfix.version))

    return prepare


def apply_hotfix(hotfix: Hotfix, target: Target, spec: TargetSpec | None, *, dry_run: bool,
                 lock_timeout: float | None = None, catalog=None, catalog_dir: str | None = None,
                 back_to: bool = False) -> ApplyOutcome:
    """Plan (and unless ``dry_run``) apply ``hotfix`` all-or-nothing on top of the target's series, recorded in
    the same transaction. ``catalog``: the one the command loaded (the pins the recorded hotfixes are judged by,
    as `hotfix status` does; their manifests' ``conflicts`` / ``after``). ``back_to``: `rollback ID --to-version V`
    (flow/plan.propose): the recorded version replaced by this one."""
    resealed: list = []
    prepare = hotfix_prepare(hotfix, target, spec, catalog=catalog, catalog_dir=catalog_dir, back_to=back_to,
                             resealed=resealed)
    try:
        change = transaction.run(target.root, prepare, dry_run=dry_run, lock_timeout=lock_timeout,
                                 after=lambda c: None if resealed else check_after(c.result, spec))  # resealed: no file
    except (Refused, DoesNotApply) as refused:
        from vllm_hotfix.flow.mounted import hotfix_refusal
        raise hotfix_refusal(refused, hotfix, target) from None
    if change.result.bytecode and not dry_run:  # applied, but Python would load stale entries: drop exactly those
        drop_stale_bytecode(change.result.bytecode)
    return ApplyOutcome(change.result, dry_run, change.record_changed, sealed=bool(resealed))


def drop_stale_bytecode(entries) -> None:
    """Remove the ``__pycache__`` entries the verdict found stale ((source, pyc, why): install/bytecode.py,
    judged in the target interpreter). Only an entry of the source's own ``__pycache__`` named after it is
    removed (the answer came from another process: it steers no other delete); a cache file is never a
    transaction's business, removing it is idempotent and Python writes a fresh one."""
    import os

    from vllm_hotfix_guard.errors import WriteFailed
    from vllm_hotfix_guard.txn.atomic import unlink_if_present

    for source, pyc, _ in entries:
        folder, name = os.path.split(pyc)
        stem = os.path.basename(source)[:-3]
        if os.path.normpath(folder) != os.path.join(os.path.dirname(os.path.normpath(source)), "__pycache__") or \
                not name.startswith(stem + ".") or not name.endswith(".pyc"):
            raise Refused(f"{pyc}: stale bytecode outside {source}'s __pycache__ (PYTHONPYCACHEPREFIX?): "
                          "not removed", hint="remove it by hand")
        try:
            unlink_if_present(pyc)
        except OSError as exc:
            raise WriteFailed(f"{pyc}: cannot remove the stale bytecode: {exc.strerror}",
                              hint="remove it where the file system is writable (a read-only image: rebuild it)") from None


# -- a raw diff on a --root -------------------------------------------------------------------------


@dataclass(frozen=True)
class RawOutcome:
    """What a raw `apply --patch` did (or would do), recorded under its id."""

    hotfix_id: str
    plan: Plan
    stats: DiffStat
    source: str
    already: bool
    reverse: bool
    dry_run: bool
    recorded: bool  # the apply is recorded (or, reversed, its record removed)
    warnings: tuple[str, ...] = ()  # e.g. a binary file of `diff -ruN` output that was skipped


def apply_raw(patch_file: Path, root: Path, *, strip: int | None, reverse: bool, dry_run: bool, hotfix_id: str | None,
              progress: Callable[[Tree, int], Callable] | None = None) -> RawOutcome:
    """A raw diff on a directory, recorded under ``hotfix_id`` (default: the file stem) like any hotfix."""
    target = Resolver(root=Path(root)).package(None)
    data = read_patch_file(patch_file)
    hotfix_id = hotfix_id or Path(patch_file).stem
    version = sha256(data)[:12]
    child = ForkedHalf.start(data, strip=strip, source=str(patch_file), root=Path(root))
    try:
        patch, child = _parse_raw(data, strip, str(patch_file), child)
        as_recorded = strip if strip is not None else (1 if patch.guessed_strip is None else patch.guessed_strip)

        def prepare(state: TargetState, tree: Tree) -> transaction.Change:
            plan, stats, already = _plan_raw(patch, data, strip, child, tree, reverse, progress)
            recorded = state.hotfixes.get(hotfix_id)
            if recorded is not None and recorded.source == "adhoc" and recorded.version != version and not reverse:
                raise Refused(f"{hotfix_id}: another diff is recorded under this id on {target.root}",
                              hint=f"roll it back (`hotfix rollback {hotfix_id} --root {target.root}`) or pass --id NAME")
            summary = (plan, stats, already)
            chains = steps_by_path(state)
            others = steps_by_path(TargetState(state.directory, state.target,
                                               {k: v for k, v in state.hotfixes.items() if k != hotfix_id}))
            if reverse and recorded is not None and any(p in others for p, _, _ in recorded.steps()):
                # under (or over) other hotfixes of the series: the series rollback takes out exactly its hunks
                from vllm_hotfix.flow.rollback_change import rollback_change

                change = rollback_change(state, tree, hotfix_id, target.root, dry_run, target)
                return transaction.Change(change.plan, change.state, True, result=(change.plan, stats, False),
                                          event=change.event)
            if reverse:
                forget = recorded is not None  # taking a recorded diff out is its rollback
                new_state = _next_state(state, dict(state.target), None, forget=hotfix_id) if forget else state
                event = Event(outcome="rolled-back" if forget else "applied", hotfix=hotfix_id, version=version,
                              detail="" if forget else "in reverse (-R); not recorded")
                return transaction.Change(Plan((), True) if already else plan, new_state, forget, result=summary,
                                          event=event if forget or not already else None)
            if already and recorded is not None:
                named = _with_names(state, tree, target, hotfix_id)
                return transaction.Change(Plan((), False), named or state, record_changed=named is not None,
                                          result=summary)
            shared = shared_with_series(hotfix_id, plan, others if recorded is not None else chains, tree, target)
            if already and shared:  # what the recorded series already wrote: nothing of its own to record
                return transaction.Change(Plan((), False), state, record_changed=False, result=summary)
            if not already and shared:
                whole = patch if child is None else parse_patch(data, strip=strip, source=patch.source)  # not a half
                refuse_overlaps(hotfix_id, whole, frozenset(), state, tree, shared, target)
            flat = flatten(plan)
            digests = parallel(sha256, [data for _, before, after in flat for data in (before, after)])
            if already:  # the reverse plan: its "before" is what is on disk (patched), its "after" the baseline
                files = tuple(RecordedFile(p, digests[2 * i + 1], digests[2 * i]) for i, (p, _, _) in enumerate(flat))
                baseline = {p: after for p, _, after in flat}
                current = {p: before for p, before, _ in flat}
            else:
                files = tuple(RecordedFile(p, digests[2 * i], digests[2 * i + 1]) for i, (p, _, _) in enumerate(flat))
                baseline = current = {p: before for p, before, _ in flat}
            new_state, keep = _record(state, tree, hotfix_id=hotfix_id, version=version, source="adhoc",
                                      patches=[(data, as_recorded, ())], files=files, baseline=baseline, current=current,
                                      package=None, target_doc=target_summary(target),
                                      code=_raw_code(patch, data, strip, child, flat, already))
            return transaction.Change(Plan((), False) if already else plan, new_state, True, keep, summary,
                                      event=Event(outcome="adopted" if already else "applied", hotfix=hotfix_id,
                                                  version=version))

        change = transaction.run(target.root, prepare, dry_run=dry_run)
    finally:
        if child is not None:
            child.cancel()
    plan, stats, already = change.result
    return RawOutcome(hotfix_id, plan, stats, patch.source, already, reverse, dry_run, change.record_changed,
                      tuple(patch.warnings))


def _with_names(state: TargetState, tree: Tree, target, hotfix_id: str) -> TargetState | None:
    """The record with the code names of ``hotfix_id`` for a record from before they were kept, once its
    series derives in full (flow/series.distrust: a record that does not is never sealed anew); else None."""
    from dataclasses import replace

    from vllm_hotfix.flow.codenames import names_in
    from vllm_hotfix.flow.series import distrust

    if state.hotfixes[hotfix_id].code is not None or distrust(state, tree, target) is not None:
        return None
    hotfixes = dict(state.hotfixes)
    hotfixes[hotfix_id] = replace(hotfixes[hotfix_id], code=names_in(state, tree, hotfix_id))
    return TargetState(state.directory, dict(state.target), hotfixes)


def _raw_code(patch: Patch, data: bytes, strip: int | None, child, flat: list, already: bool) -> tuple:
    """flow/codenames.step_names of a raw diff's step (the whole diff, not a parsed half)."""
    from vllm_hotfix.flow.codenames import step_names

    whole = patch if child is None else parse_patch(data, strip=strip, source=patch.source)
    return step_names(whole, [(p, after, before) if already else (p, before, after) for p, before, after in flat])


def _parse_raw(data: bytes, strip: int | None, source: str, child: ForkedHalf | None
               ) -> tuple[Patch, ForkedHalf | None]:
    """The whole patch, or with a child: the first half, once the child has parsed the second.
    When a half does not parse, the whole diff is parsed here, for the sequential error message;
    also when the halves could disagree (a -p guessed in the first half) or the second half has
    warnings to print (a skipped binary)."""
    if child is not None:
        try:
            first = parse_patch(child.first_half, strip=strip, source=source)
        except HotfixError:
            first = None
        alone = first is not None and not (strip is None and first.guessed_strip is not None) and \
            data.find(b"\nBinary files ", len(child.first_half) - 1) < 0
        if alone and child.child_parsed():
            return first, child  # type: ignore[return-value]
        child.cancel()
    return parse_patch(data, strip=strip, source=source), None


def _plan_raw(patch: Patch, data: bytes, strip: int | None, child: ForkedHalf | None, tree: Tree, reverse: bool,
              progress) -> tuple[Plan, DiffStat, bool]:
    """The plan of the whole diff. With a child, ``patch`` is the first half and the child plans the
    rest; any trouble there means: parse and plan the whole diff here, sequentially."""
    read = progress(tree, len(patch.files)) if progress is not None else tree.read
    if child is not None:
        merged = child.finish(patch, tree, read, reverse=reverse)
        if merged is not None:
            return merged[0], merged[1], False
        patch = parse_patch(data, strip=strip, source=patch.source)
    try:
        return plan_patch(patch, read, reverse=reverse), patch.stats, False
    except DoesNotApply as forward_error:
        try:
            return plan_patch(patch, tree.read, reverse=not reverse), patch.stats, True
        except DoesNotApply:
            raise forward_error from None


def progress_reader(tree: Tree, total: int, *, minimum: int = 50):
    """``tree.read`` that draws "planning k/N" on a terminal for large patches."""
    if total < minimum or not sys.stderr.isatty():
        return tree.read
    seen: set[str] = set()

    def read(relpath: str):
        seen.add(relpath)
        if len(seen) % 25 == 0 or len(seen) == total:
            sys.stderr.write(f"\rhotfix: planning {len(seen)}/{total} files")
            if len(seen) >= total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        return tree.read(relpath)

    return read

"""Planning a hotfix on a target's files (``propose``: the series with it, its plan, what it refuses). No
writes; proving the baseline and the post-apply checks are flow/baseline_proof.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_hotfix_guard.core.hunk_apply import FileEdit, Plan, detect, plan_patch
from vllm_hotfix_guard.core.pep440 import same_version
from vllm_hotfix_guard.core.diff import Patch, reverse_patch
from vllm_hotfix_guard.core.verdict import APPLIED, CHANGED, DRIFTED, LOST, MISSING, STALE_BYTECODE, UNKNOWN
from vllm_hotfix_guard.errors import DoesNotApply, HotfixError, InvalidInput, Refused
from vllm_hotfix.flow.hotfix import Hotfix, sha256
from vllm_hotfix.flow.series import Series, judge_recorded, level, release_changed, steps_by_path
from vllm_hotfix.flow.resolve import target_option
from vllm_hotfix.flow.restore import not_pristine, restore_advice
from vllm_hotfix.install.locate import Target
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix_guard.txn.state import RecordedFile, RecordedHotfix, TargetState

if TYPE_CHECKING:  # types only: a raw --patch apply never loads the catalog (packaging costs 25 ms)
    from vllm_hotfix.catalog.model import Manifest


@dataclass(frozen=True)
class Proposal:
    """A hotfix, the target it is for, and the plan that applies it there."""

    hotfix: Hotfix
    target: Target
    plan: Plan
    already: bool  # the series is in the files already; plan is then its reverse (unused)
    baseline: dict[str, bytes | None]  # path -> bytes just before this hotfix (the series below it left them)
    superseded: RecordedHotfix | None = None
    contained_in: tuple[str, ...] = ()  # its change is already there, as part of these recorded hotfixes
    in_series: frozenset = frozenset()  # paths the series below it touches too (their pristine bytes derive)
    dropped: tuple[str, ...] = ()       # records of another release replaced by this apply (all lost)
    reset: bool = False                 # the record was made on another release: a new series starts
    bytecode: tuple = ()                # applied, but these (source, pyc, why) would be loaded instead: drop them

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
                         for p, before, after in flatten(self.plan))
        after = self.after
        return tuple(RecordedFile(p, sha256(self.baseline.get(p)), sha256(after[p]))
                     for p in after if self.baseline.get(p) != after[p])


def flatten(plan: Plan) -> list[tuple[str, bytes | None, bytes | None]]:
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


def refuse_drifted(hotfix_id: str, detail: str, target: Target, checks=(), option: str | None = None) -> Refused:
    """A drifted record is not planned on: a file missing or neither baseline nor patched comes back from the
    release first (flow/restore, as `hotfix status` advises), one only partly back to baseline is rolled back."""
    option = option if option is not None else target_option(target)
    odd = [c.path for c in checks if c.state in (CHANGED, MISSING)]
    if odd:
        hint = f"{restore_advice(target, odd)}; then `hotfix status {option}` names what to apply again, in order"
    else:
        hint = f"`hotfix rollback {hotfix_id} {option}` takes out what is left of it, then apply again"
    return Refused(f"{hotfix_id} is drifted on {target.root}: {detail}", hint=hint)


def propose(hotfix: Hotfix, target: Target, state: TargetState, tree: Tree | None = None, *, catalog=None,
            back_to: bool = False) -> Proposal:
    """Plan the hotfix on the current files, on top of the target's series: forward, 'already applied',
    re-applied in place (lost), or an upgrade in one plan.

    A recorded hotfix is judged by the same verdict as `hotfix status`: applied -> nothing to do,
    drifted -> refused (exit 3), lost -> planned again at its place in the series. A new one goes on
    top: the files it shares with the series must hold the series' bytes, its hunks must not meet the
    lines of the hotfixes below (unless its manifest's ``after`` names them), and neither side may
    declare the other in ``conflicts``. ``catalog``: the one the command loaded (the pins of recorded catalog
    hotfixes, as `hotfix status` judges them; the manifests of recorded ids). ``back_to``: `rollback ID
    --to-version V` -- the recorded version is replaced by this one (``hotfix``, version V) in one plan,
    whichever supersedes which; a target with no record of it for this release is refused."""
    tree = tree if tree is not None else Tree(target.root)
    verdicts = judge_recorded(state, target, tree=tree, catalog=catalog)  # the verdict `hotfix status` shows
    broken = next((j.detail for j in verdicts.values() if j.state == UNKNOWN), None)
    if broken is not None:
        raise InvalidInput(f"{state.path}: {broken}",
                           hint=f"see `hotfix status {target_option(target)}`; restore the files (reinstall / git "
                                "checkout), then apply again")
    checks = {hotfix_id: j.files for hotfix_id, j in verdicts.items()}
    recorded = state.hotfixes.get(hotfix.id)
    series = hotfix.series
    dropped: tuple[str, ...] = ()
    reset = bool(state.hotfixes) and release_changed(state, target)
    if reset:
        # every record describes another release's files: none is in effect, a new series starts here
        dropped = tuple(h for h in state.hotfixes if h != hotfix.id)
        state = TargetState(state.directory, dict(state.target), {})
        verdicts, checks, recorded = {}, {}, None
    below = state  # the series this hotfix goes on top of (without its own record when it is planned again)
    if back_to and recorded is None:
        raise Refused(f"{hotfix.id}: no version of it is recorded for this release at {target.root}"
                      + (" (the record was made on another release)" if reset else ""),
                      hint=f"`hotfix apply {hotfix.ref} {target_option(target)}` applies that version")
    if recorded is not None:
        word, detail = verdicts[hotfix.id].state, verdicts[hotfix.id].detail
        if word == DRIFTED:
            raise refuse_drifted(hotfix.id, detail, target, verdicts[hotfix.id].files,
                                 target_option(target, catalog, (recorded.catalog,)))
        uppers = sorted({u for c in checks.get(hotfix.id, ()) for u in c.above})
        if word in (APPLIED, STALE_BYTECODE) and same_version(recorded.version, hotfix.version):
            return Proposal(hotfix, target, Plan((), False), True, {},
                            bytecode=verdicts[hotfix.id].bytecode if word == STALE_BYTECODE else ())
        if uppers and not same_version(recorded.version, hotfix.version):
            raise Refused(f"{hotfix.id}: version {recorded.version} is under {', '.join(uppers)} in the series of "
                          f"{target.root}; {hotfix.ref} cannot replace it there",
                          hint=f"roll back {', '.join(reversed(uppers))} first, upgrade {hotfix.id}, then apply them again")
        if word == LOST:
            _refuse_lost_below(hotfix.id, steps_by_path(state), tree)
            if not uppers:  # every file at its baseline: plan as a first apply, the new record replaces it
                recorded, below = None, _without(state, hotfix.id)
            else:  # under others: again at its place, which needs exactly the bytes it recorded
                return _propose_in_place(hotfix, target, state, recorded, tree, uppers)
    if recorded is not None and not same_version(recorded.version, hotfix.version):
        return _propose_upgrade(hotfix, target, state, recorded, tree, back_to=back_to)
    _refuse_conflicts(hotfix, below, catalog)
    chains = steps_by_path(below)
    detection = detect(series, tree.read)
    shared = shared_with_series(hotfix.id, detection.plan, chains, tree, target)
    if detection.state == "conflict":
        raise does_not_apply(hotfix, target, detection.error, chains, tree, catalog) from None
    if detection.state == "applied":
        if shared:  # its change is what the recorded series already wrote: nothing of its own to record
            owners = tuple(dict.fromkeys(s[0] for p in shared for s in chains[p]))
            return Proposal(hotfix, target, detection.plan, True, {}, contained_in=owners)
        return Proposal(hotfix, target, detection.plan, True, {p: after for p, _, after in flatten(detection.plan)},
                        dropped=dropped, reset=reset)
    refuse_overlaps(hotfix.id, series, frozenset(_declared(hotfix.manifest, "after")), below, tree, shared, target)
    return Proposal(hotfix, target, detection.plan, False, {p: before for p, before, _ in flatten(detection.plan)},
                    in_series=frozenset(shared), dropped=dropped, reset=reset)


def does_not_apply(hotfix: Hotfix, target: Target, error: DoesNotApply, chains: dict, tree: Tree,
                   catalog=None) -> DoesNotApply:
    """Why a new hotfix does not apply, as `hotfix status` words it (flow/hotfix_status): on top of what the
    recorded series wrote it conflicts with those hotfixes; a file back to an earlier state of the series waits
    for the ones not in effect; a file missing or changed comes back from the release first (flow/restore)."""
    option = target_option(target, catalog)
    paths = dict.fromkeys(p for fp in hotfix.series.files for p in (fp.old_path, fp.new_path) if p)
    hit = next((p for p in paths if error.message.startswith(quote_path(p) + ":")), None)
    if hit is None:
        return error
    try:
        read = tree.read(hit)
    except HotfixError:
        return error
    data = read.data if read is not None else None
    at = level(chains[hit], sha256(data)) if hit in chains else None
    status = f"`hotfix status {hotfix.id if hotfix.manifest is not None else ''} {option}`".replace("  ", " ")
    if at is not None and at == len(chains[hit]):
        names = ", ".join(s[0] for s in chains[hit])
        return DoesNotApply(f"{hotfix.ref} does not apply on top of {names} (recorded on {target.root}): "
                            f"{error.message}", hint=f"it conflicts with {names}: roll back {names} first, or make "
                                                     "one hotfix of both")
    if at is not None:
        return DoesNotApply(f"{hotfix.ref} goes on top of {chains[hit][at][0]}, which is recorded but not in effect "
                            f"in {quote_path(hit)}: {error.message}", hint=f"{status} says how to bring it back first")
    if data is not None and hit not in chains and hit not in not_pristine(target, [hit]):
        return error  # the release's own file: the patch does not fit it
    return DoesNotApply(error.message, hint=f"{restore_advice(target, [hit])}; then {status} names what to apply, in order")


def _propose_upgrade(hotfix: Hotfix, target: Target, state: TargetState, recorded: RecordedHotfix,
                     tree: Tree, *, back_to: bool = False) -> Proposal:
    """Another version of a recorded hotfix that declares it supersedes it (or any other version, ``back_to``:
    `rollback --to-version`): one plan that reverses the applied version's recorded patch and applies the
    new series."""
    series = hotfix.series
    if not back_to and not _supersedes(hotfix, recorded):
        raise Refused(f"{hotfix.id}: version {recorded.version} is applied to {target.root}; "
                      f"{hotfix.ref} does not declare that it supersedes it",
                      hint=f"roll it back first: hotfix rollback {hotfix.id} {target_option(target)}")
    from vllm_hotfix_guard.txn.derive import recorded_patch

    old = recorded_patch(state, recorded)
    try:
        undo = plan_patch(old, tree.read, reverse=True)
    except DoesNotApply as exc:
        raise Refused(f"{hotfix.id}: the applied version {recorded.version} cannot be reversed: {exc.message}",
                      hint="the files drifted from what that version wrote; see `hotfix status`") from None
    baseline = {p: after for p, _, after in flatten(undo)}
    combined = Patch(reverse_patch(old).files + series.files, hotfix.ref)
    plan = plan_patch(combined, tree.read)
    for p, before, _ in flatten(plan):
        baseline.setdefault(p, before)
    others = steps_by_path(_without(state, hotfix.id))
    return Proposal(hotfix, target, plan, False, baseline, recorded,
                    in_series=frozenset(p for p in baseline if p in others))


def _propose_in_place(hotfix: Hotfix, target: Target, state: TargetState, recorded: RecordedHotfix, tree: Tree,
                      uppers: list[str]) -> Proposal:
    """A lost hotfix under others (``uppers``), planned again at its place in the series: it must give
    exactly the bytes it recorded."""
    series = hotfix.series
    detection = detect(series, tree.read)
    if detection.state != "applicable":
        raise detection.error or Refused(f"{hotfix.id}: does not apply again at its place in the series")
    before = {p: b for p, b, _ in flatten(detection.plan)}
    others = steps_by_path(_without(state, hotfix.id))
    proposal = Proposal(hotfix, target, detection.plan, False, before,
                        in_series=frozenset(p for p in before if p in others))
    if {(f.path, f.before_sha256, f.after_sha256) for f in proposal.recorded_files()} != set(recorded.steps()):
        raise Refused(f"{hotfix.id}: applying it again does not give the bytes it recorded under "
                      f"{', '.join(uppers)}", hint=f"roll back {', '.join(reversed(uppers))} first")
    return proposal


def _without(state: TargetState, hotfix_id: str) -> TargetState:
    from dataclasses import replace  # a group's pending state (flow/apply_group) stays one

    return replace(state, hotfixes={k: v for k, v in state.hotfixes.items() if k != hotfix_id})


def _refuse_lost_below(hotfix_id: str, chains: dict, tree: Tree) -> None:
    """A lost hotfix goes back at its place only when every file holds exactly what it was applied on."""
    for path, chain in chains.items():
        index = next((i for i, s in enumerate(chain) if s[0] == hotfix_id), None)
        if index is None:
            continue
        found = tree.read(path)
        at = level(chain, sha256(found.data if found else None))
        if at is not None and at < index:
            lost = [s[0] for s in chain[at:index]]
            raise Refused(f"{hotfix_id}: {path} is back to before {', '.join(lost)}, which {hotfix_id} was applied on",
                          hint="apply them again first, in series order: " + ", then ".join(f"hotfix apply {h}" for h in lost))


def _declared(manifest, key: str) -> tuple[str, ...]:
    return tuple(getattr(manifest, key, ()) or ()) if manifest is not None else ()


def _refuse_conflicts(hotfix: Hotfix, state: TargetState, catalog) -> None:
    """``conflicts`` (either side declares the other) and ``after`` (a recorded one must stay above)."""
    mine = hotfix.manifest
    for other_id in state.hotfixes:
        if other_id == hotfix.id:
            continue
        theirs = catalog.get(other_id) if catalog is not None and other_id in catalog.ids() else None
        if other_id in _declared(mine, "conflicts") or hotfix.id in _declared(theirs, "conflicts"):
            who = mine if other_id in _declared(mine, "conflicts") else theirs
            raise Refused(f"{hotfix.id} conflicts with {other_id}, which is applied to {state.target.get('root')} "
                          f"(declared in {who.ref})", hint=f"roll back {other_id} first, or keep {other_id}")
        if hotfix.id in _declared(theirs, "after"):
            raise Refused(f"{other_id} declares after = [{hotfix.id!r}]: it must stay above {hotfix.id} in the series",
                          hint=f"roll back {other_id}, apply {hotfix.id}, then apply {other_id} again")


def shared_with_series(hotfix_id: str, plan: Plan | None, chains: dict, tree: Tree, target: Target) -> list[str]:
    """The paths ``plan`` touches that the recorded series touches too; each must hold the top of its
    series (the new hotfix goes on top of what is in effect), else Refused."""
    touched = {p for p, _, _ in flatten(plan)} if plan is not None else set()
    shared = sorted(p for p in touched if p in chains)
    for path in shared:
        found = tree.read(path)
        if level(chains[path], sha256(found.data if found else None)) != len(chains[path]):
            names = ", ".join(s[0] for s in chains[path])
            raise Refused(f"{path}: does not hold what the series ({names}) put there, so {hotfix_id} cannot go on "
                          f"top of it", hint=f"see `hotfix status {target_option(target)}`; re-apply or roll back {names} first")
    return shared


def refuse_overlaps(hotfix_id: str, series: Patch, ordered: frozenset, state: TargetState, tree: Tree,
                    shared: list[str], target: Target) -> None:
    """Two hotfixes whose hunks meet are refused, naming both, unless the new one orders them (``ordered``:
    its manifest's ``after``). The one rule for catalog, ad-hoc and raw applies."""
    if not shared:
        return
    chain_of = Series(state, tree)
    for path in shared:
        found = tree.read(path)
        part = Patch(tuple(fp for fp in series.files if path in (fp.old_path, fp.new_path)), hotfix_id)
        hits = chain_of.overlapping(hotfix_id, path, found.data if found else None,
                                    found.mode if found else 0o100644, part, ordered)
        if hits:
            raise Refused(f"{hotfix_id} and {', '.join(hits)} change the same lines of {path}",
                          hint=f"if {hotfix_id} is meant to go on top of {hits[0]}, declare after = [\"{hits[0]}\"] in "
                               f"its manifest; else roll back {hits[0]} (`hotfix rollback {hits[0]} {target_option(target)}`)")


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

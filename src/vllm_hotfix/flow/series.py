"""A target's series: its recorded hotfixes in the order they were applied, as quilt keeps patches.

The verdict on a record is txn/judgement.py's (``judged`` here hands it what a command knows of the
target: its files through install/tree.Tree, the pending journal, the bytecode judged in the target's
interpreter); the bytes of every state of a chain come from txn/derive.py. What a *write* needs on top
of that lives here: overlaps (``Series.overlapping``) and taking one hotfix out of the middle
(``Series.without``, ``rebased_records``).

Reads only: the transaction runner (flow/transaction.py) writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_hotfix_guard.core.hunk_apply import FileState
from vllm_hotfix_guard.core.diff import Patch
from vllm_hotfix.core.regions import Overlaps, spans_of
from vllm_hotfix_guard.errors import DoesNotApply, Refused
from vllm_hotfix.flow.hotfix import sha256
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.paths import TargetDir
from vllm_hotfix_guard.txn.derive import Derivation, apply_part, level, steps_by_path  # noqa: F401 - the series' API
from vllm_hotfix_guard.txn.judgement import Judged, judge_record, release_of
from vllm_hotfix_guard.txn.state import RecordedFile, RecordedHotfix, TargetState

Step = tuple  # (hotfix id, sha256 before, sha256 after)


def judge_recorded(state: TargetState, target, *, catalog=None, bytecode: bool = True,
                   tree: Tree | None = None) -> dict[str, Judged]:
    """txn/judgement.judge_record for this target's record, with everything derived (the commands' rule):
    the files read through ``tree`` (install/tree.Tree: no symlink followed), the modules' bytecode judged
    by the target's own interpreter (install/locate.stale_bytecode; a --root checkout: this one), and each
    catalog hotfix's kept patch against the pin of ``catalog`` (catalog/index.Catalog: every command that
    judges a record passes the catalog it loaded, so status, audit and apply give one word)."""
    tree = tree if tree is not None else Tree(target.root)

    def stale(sources: list[str]) -> dict:
        from vllm_hotfix.install.in_target import in_interpreter

        return in_interpreter(target.python, sources)

    pinned, inapplicable = _catalog_checks(catalog, state, target) if catalog is not None else (None, None)
    pending = TargetDir(state.directory).pending() and not tree.recovered  # a dry run plans on what recover leaves
    return judge_record(state, target, read=tree.read, pending=pending, derive=True,
                        pinned=pinned, inapplicable=inapplicable, bytecode=stale if bytecode else None)


def manifest_of_record(catalog, recorded: RecordedHotfix):
    """The catalog's manifest of the version a catalog hotfix was recorded at, or None."""
    if catalog is None or recorded.source != "catalog" or recorded.id not in catalog.ids():
        return None
    try:
        return catalog.get(recorded.id, recorded.version)
    except Refused:  # that version is not in the catalog (any more): nothing to pin it by
        return None


def _catalog_checks(catalog, state: TargetState, target) -> tuple:
    from vllm_hotfix.flow.applicability import applicability
    from vllm_hotfix.flow.hotfix import pin_problem

    def pinned(recorded: RecordedHotfix) -> str | None:
        found = manifest_of_record(catalog, recorded)
        return pin_problem(found, recorded, state, target) if found is not None else None

    def inapplicable(recorded: RecordedHotfix) -> tuple | None:  # an older record, without its own range
        found = manifest_of_record(catalog, recorded)
        why = applicability(found, found.spec_for(target), target) if found is not None else None
        return (why.state, why.message) if why is not None else None

    return pinned, inapplicable


def distrust(state: TargetState, tree: Tree, target) -> str | None:
    """Why a record is not what `hotfix apply` wrote for this install, or None (txn/judgement.record_problem,
    everything derived): what every write checks before a record steers it."""
    from vllm_hotfix_guard.core.verdict import BrokenSeries, series_checks
    from vllm_hotfix_guard.txn.judgement import record_problem

    try:
        series_checks(state.series(), lambda path: (None, None))
    except BrokenSeries as exc:
        return str(exc)
    return record_problem(state, target, tree.read, derive=True) if state.hotfixes else None


def release_changed(state: TargetState, target) -> bool:
    """The package is another release than the one the record was made on (pip install, image rebuild,
    a checkout's HEAD moved): txn/judgement.release_of, the verdict's own rule."""
    return bool(state.hotfixes) and release_of(state, target)[2] is not None


@dataclass(frozen=True)
class Rebase:
    """What taking one hotfix out of the middle of a series does to one file."""

    path: str
    current: FileState | None
    after: bytes | None              # the file's new bytes
    steps: tuple[tuple[str, str | None, str | None], ...]  # the remaining steps, re-derived: (id, before, after)


class Series(Derivation):
    """The recorded series of one target as bytes (txn/derive.py), and what writes need of it."""

    def __init__(self, state: TargetState, tree: Tree):
        super().__init__(state, tree.read, tree.root)
        self.tree = tree
        self.in_place = False  # ``without`` reversed hunks under other hotfixes that stay

    def overlapping(self, owner: str, path: str, top: bytes | None, mode: int, new_part: Patch,
                    ordered: frozenset[str]) -> list[str]:
        """The hotfixes of ``path``'s series whose lines ``owner``'s new part (placed on ``top``, the
        file now) meets, leaving out those ``ordered`` (its manifest's ``after``)."""
        states, _, _ = self.states(path)
        tracker = Overlaps()
        for (hotfix_id, _, _), data in zip(self.chains[path], states):
            _, placed = apply_part(self.part(hotfix_id, path), path, data, mode)
            for fp, placements in placed:
                tracker.step(hotfix_id, spans_of(fp.hunks, placements))
        hits: list[str] = []
        _, placed = apply_part(new_part, path, top, mode)
        for fp, placements in placed:
            hits += [h for h in tracker.step(owner, spans_of(fp.hunks, placements)) if h not in hits]
        return [h for h in hits if h not in ordered]

    def without(self, hotfix_id: str, option: str = "") -> list[Rebase]:
        """Take ``hotfix_id`` out of every file it touches: its hunks reversed on the file as it is now,
        which must equal the series without it replayed from the bytes before it (each upper hotfix's
        recorded patch applied again). Refused naming the hotfix above when either does not work, with the
        rollback to run first (``option``: how it names the target, resolve.target_option, so it runs as pasted)."""
        option = f" {option}" if option else ""
        out = []
        for path, chain in self.chains.items():
            index = next((i for i, s in enumerate(chain) if s[0] == hotfix_id), None)
            if index is None:
                continue
            states, at, found = self.states(path)
            mode = found.mode if found else 0o100644
            uppers = [s[0] for s in chain[index + 1:]]
            replay, rest = [states[index]], []
            for upper_id in uppers:  # the series without it, from the bytes it was applied on
                try:
                    after, _ = apply_part(self.part(upper_id, path), path, replay[-1], mode)
                except DoesNotApply:
                    raise Refused(f"{hotfix_id}: {upper_id} is applied on top of it in {path} and does not apply "
                                  f"without it", hint=f"roll back {upper_id} first (`hotfix rollback {upper_id}{option}`), "
                                                      f"then {hotfix_id}") from None
                rest.append((upper_id, sha256(replay[-1]), sha256(after)))
                replay.append(after)
            if at <= index:  # it is not in this file any more (lost): the file stays, the records above rebase
                out.append(Rebase(path, found, states[at], tuple(rest)))
                continue
            if at == index + 1:  # it is the top of what is in effect: back to the (checked) bytes before it
                out.append(Rebase(path, found, states[index], tuple(rest)))
                continue
            try:  # under others in effect: the file loses exactly its hunks
                reversed_here, _ = apply_part(self.part(hotfix_id, path), path, states[at], mode, reverse=True)
            except DoesNotApply:
                reversed_here = _NO_RESULT
            self.in_place = True
            if reversed_here != replay[at - index - 1]:
                raise Refused(f"{hotfix_id}: its hunks in {path} do not reverse cleanly under {', '.join(uppers)}",
                              hint=f"roll back {uppers[-1]} first (`hotfix rollback {uppers[-1]}{option}`), then {hotfix_id}")
            out.append(Rebase(path, found, reversed_here, tuple(rest)))
        return out


_NO_RESULT = object()


def rebased_records(state: TargetState, hotfix_id: str, rebases: list[Rebase]) -> dict[str, RecordedHotfix]:
    """The records of the hotfixes above ``hotfix_id`` with the re-derived before / after of each file."""
    from dataclasses import replace

    new_steps: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for rebase in rebases:
        for upper_id, before, after in rebase.steps:
            new_steps[(upper_id, rebase.path)] = (before, after)
    out = {}
    for other_id, recorded in state.hotfixes.items():
        if other_id == hotfix_id:
            continue
        if any((other_id, f.path) in new_steps for f in recorded.files):
            files = tuple(RecordedFile(f.path, *new_steps[(other_id, f.path)]) if (other_id, f.path) in new_steps else f
                          for f in recorded.files)
            recorded = replace(recorded, files=files)
        out[other_id] = recorded
    return out

"""A target's series: its recorded hotfixes in the order they were applied, as quilt keeps patches.

Each file a hotfix touches records the sha256 it had just before and just after that hotfix, so the
records of one file chain from its pristine bytes to what it must hold now (the top of its series).
Here the chain is checked against the files (``file_checks``: core.verdict's rule), and turned back
into bytes where a write needs them (``Series.states``): from the bottom hotfix's kept original, each
step re-derived by applying that hotfix's recorded patch, every result checked against the record --
a record whose hashes do not follow from its patches steers no write.

Reads only: the transaction runner (flow/transaction.py) writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from vllm_hotfix.core.apply import FileState, plan_patch
from vllm_hotfix.core.diff import Patch
from vllm_hotfix.core.regions import Overlaps, spans_of
from vllm_hotfix.core.verdict import BrokenSeries, FileCheck, judge, release_change, same_release, series_checks
from vllm_hotfix.core.verdict import release_seen as verdict_release_seen
from vllm_hotfix.errors import DoesNotApply, InvalidInput, Refused
from vllm_hotfix.flow.hotfix import recorded_series, sha256
from vllm_hotfix.install.tree import Tree
from vllm_hotfix.paths import TargetDir
from vllm_hotfix.txn.state import RecordedFile, RecordedHotfix, TargetState

Step = tuple  # (hotfix id, sha256 before, sha256 after)


def steps_by_path(state: TargetState) -> dict[str, list[Step]]:
    """path -> the steps of every recorded hotfix that touches it, in series order."""
    chains: dict[str, list[Step]] = {}
    for hotfix_id, steps in state.series():
        for path, before, after in steps:
            chains.setdefault(path, []).append((hotfix_id, before, after))
    return chains


def file_checks(state: TargetState, tree: Tree, target=None) -> tuple[dict[str, tuple[FileCheck, ...]], str | None]:
    """({hotfix id: its FileChecks}, None), or ({}, why) when the record cannot be trusted: its chains do not
    link, or (given the ``target``) ``distrust`` finds the record does not describe this install."""
    root = str(tree.root)

    def current(path: str) -> tuple[str | None, str]:
        found = tree.read(path)
        return sha256(found.data if found else None), f"{root}/{path}"

    try:
        checks = series_checks(state.series(), current)
    except BrokenSeries as exc:
        return {}, str(exc)
    problem = distrust(state, tree, target) if target is not None and state.hotfixes else None
    return (checks, None) if problem is None else ({}, problem)


def distrust(state: TargetState, tree: Tree, target) -> str | None:
    """Why a record is not what `hotfix apply` wrote for this install, or None. Recorded hashes are claims:
    for a wheel of the recorded release, each file's series must start from RECORD's sha256
    (core.verdict.origin_problem, the guard's rule too); and every state a file can be found at must follow
    from the kept original and the recorded patches (``Series.states``: a forged "after" fails there)."""
    from vllm_hotfix.core.verdict import origin_problem
    from vllm_hotfix.install.facts import record_sha256s

    chains = steps_by_path(state)
    if target.kind == "wheel" and target.dist_info is not None and \
            same_release(state.target.get("version"), target.version):
        problem = origin_problem(state.series(), record_sha256s(target.dist_info, chains))
        if problem is not None:
            return problem
    series = Series(state, tree)
    for path, chain in chains.items():
        found = tree.read(path)
        if level(chain, sha256(found.data if found else None)) is None:
            continue  # neither of its states: drifted, said by the files' verdict
        try:
            series.states(path)
        except (InvalidInput, Refused) as exc:
            return exc.message
    return None


def release_seen(state: TargetState, target) -> tuple[str | None, str | None]:
    """(the release the record is judged against, how a checkout's HEAD moved or None):
    core.verdict.release_seen, the guard's rule too, with what this target's record and Target say."""
    return verdict_release_seen(
        recorded=state.target.get("version"), installed=lambda: target.version,
        recorded_commit=state.target.get("commit"), commit=target.commit,
        own_version_file=bool(target.version_file and target.version_file in steps_by_path(state)))


def release_changed(state: TargetState, target) -> bool:
    """The package is another release than the one the record was made on (pip install, image rebuild,
    a checkout's HEAD moved)."""
    now, moved = release_seen(state, target)
    return release_change(state.target.get("version"), now, moved) is not None


def judge_recorded(state: TargetState, hotfix_id: str, target, checks: dict, broken: str | None, *,
                   inapplicable: tuple[str, str] | None = None) -> tuple[str, str]:
    """core.verdict.judge for one recorded hotfix of this target (apply, status, export, doctor)."""
    now, moved = release_seen(state, target)
    return judge(checks.get(hotfix_id, ()), pending=TargetDir(state.directory).pending(), broken=broken,
                 inapplicable=inapplicable, recorded_release=state.target.get("version"),
                 installed_release=now, moved=moved, distribution=target.distribution or target.package)


def level(chain: list[Step], current: str | None) -> int | None:
    """Which state of the chain a file holds: 0 = before the first step, len(chain) = after the last."""
    states = [chain[0][1]] + [after for _, _, after in chain]
    return next((j for j in range(len(states) - 1, -1, -1) if states[j] == current), None)


def _single(path: str, data: bytes | None, mode: int) -> "callable":
    state = None if data is None else FileState(data, mode)
    return lambda p: state if p == path else None


def apply_part(part: Patch, path: str, data: bytes | None, mode: int, *, reverse: bool = False
               ) -> tuple[bytes | None, list]:
    """``data`` of ``path`` with one hotfix's file patches for it applied (or reversed), and the
    placements of each file patch (in order); DoesNotApply when a hunk does not fit."""
    placements = []
    files = part.files[::-1] if reverse else part.files
    for fp in files:
        plan = plan_patch(Patch((fp,), part.source), _single(path, data, mode), reverse=reverse)
        edit = next((e for e in plan.edits if e.path == path), None)
        if edit is not None:
            data = edit.after
            placements.append((fp, edit.placements))
    return data, placements


@dataclass(frozen=True)
class Rebase:
    """What taking one hotfix out of the middle of a series does to one file."""

    path: str
    current: FileState | None
    after: bytes | None              # the file's new bytes
    steps: tuple[tuple[str, str | None, str | None], ...]  # the remaining steps, re-derived: (id, before, after)


class Series:
    """The recorded series of one target, turned into bytes on demand (each result checked)."""

    def __init__(self, state: TargetState, tree: Tree):
        self.state, self.tree = state, tree
        self.chains = steps_by_path(state)
        self._patches: dict[str, Patch] = {}
        self.reversed_any = False  # some state below a file came from reversing a patch (no kept original)
        self.in_place = False  # ``without`` reversed hunks under other hotfixes that stay

    def part(self, hotfix_id: str, path: str) -> Patch:
        """The file patches of ``hotfix_id``'s recorded patches that touch ``path`` (modify, create, delete;
        a rename or copy only where no other hotfix touches the path: it is planned on the whole tree)."""
        if hotfix_id not in self._patches:
            self._patches[hotfix_id] = recorded_series(self.state, self.state.hotfixes[hotfix_id])
        files = tuple(fp for fp in self._patches[hotfix_id].files if path in (fp.old_path, fp.new_path))
        if _moves(files) and len(self.chains.get(path, ())) > 1:
            raise Refused(f"{path}: {hotfix_id} renames or copies it, and another hotfix of the series touches it too",
                          hint="a series supports renamed files only when no other hotfix touches them")
        return Patch(files, hotfix_id)

    def states(self, path: str) -> tuple[list[bytes | None], int, FileState | None]:
        """(bytes of every state of ``path``'s chain, the state the file holds now, the file): the
        bytes below come from the kept originals or by reversing each step, the ones above by applying
        each recorded patch, and every one must have the recorded sha256."""
        chain = self.chains[path]
        found = self.tree.read(path)
        current = found.data if found else None
        at = level(chain, sha256(current))
        if at is None:
            raise Refused(f"{self.tree.root / path}: neither what {', '.join(s[0] for s in chain)} wrote nor the "
                          f"baseline (changed by hand?)",
                          hint="restore it (reinstall the package / git checkout), then retry; nothing was changed")
        mode = found.mode if found else 0o100644
        wanted = [chain[0][1]] + [after for _, _, after in chain]
        states: list[bytes | None] = [None] * len(wanted)
        states[at] = current
        for i in range(at - 1, -1, -1):  # down: the step's kept original, else its patch reversed
            hotfix_id = chain[i][0]
            if wanted[i] is None:  # the file did not exist before this step
                continue
            kept = self._kept(hotfix_id, path, wanted[i])
            if kept is None:
                self.reversed_any = True
            states[i] = kept if kept is not None else self._derive(hotfix_id, path, states[i + 1], mode, True, wanted[i])
        for i in range(at, len(chain)):  # up: each recorded patch applied to the state below it
            states[i + 1] = self._derive(chain[i][0], path, states[i], mode, False, wanted[i + 1])
        return states, at, found

    def _kept(self, hotfix_id: str, path: str, expected: str | None) -> bytes | None:
        if expected is None:
            return None
        recorded = self.state.hotfixes[hotfix_id]
        return self.state.read_backup(recorded, RecordedFile(path, expected, None))

    def _derive(self, hotfix_id: str, path: str, data: bytes | None, mode: int, reverse: bool,
                expected: str | None) -> bytes | None:
        part = self.part(hotfix_id, path)
        try:
            if _moves(part.files):  # a rename / copy reads its other path: plan it on the tree as it is
                plan = plan_patch(part, self.tree.read, reverse=reverse)
                result = next((e.after for e in plan.edits if e.path == path),
                              None if any(e.old_path == path for e in plan.edits) else data)
            else:
                result, _ = apply_part(part, path, data, mode, reverse=reverse)
        except DoesNotApply as exc:
            raise InvalidInput(f"{self.state.path}: {hotfix_id}'s recorded patch does not give the recorded "
                               f"bytes of {path}: {exc.message}",
                               hint="the record does not describe the files; see `hotfix status`") from None
        if sha256(result) != expected:
            raise InvalidInput(f"{self.state.path}: {hotfix_id}'s record of {path} does not follow from its "
                               f"recorded patch (sha256 {str(sha256(result))[:12]}, recorded {str(expected)[:12]})",
                               hint="the record does not describe the files; nothing was written")
        return result

    def pristine(self, paths: Iterable[str]) -> dict[str, bytes | None]:
        """The bytes each path had before the series (derived and checked as in ``states``)."""
        return {path: self.states(path)[0][0] for path in paths}

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

    def without(self, hotfix_id: str) -> list[Rebase]:
        """Take ``hotfix_id`` out of every file it touches: its hunks reversed on the file as it is now,
        which must equal the series without it replayed from the bytes before it (each upper hotfix's
        recorded patch applied again). Refused naming the hotfix above when either does not work."""
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
                                  f"without it", hint=f"roll back {upper_id} first (`hotfix rollback {upper_id}`), "
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
                              hint=f"roll back {uppers[-1]} first (`hotfix rollback {uppers[-1]}`), then {hotfix_id}")
            out.append(Rebase(path, found, reversed_here, tuple(rest)))
        return out


_NO_RESULT = object()


def _moves(files) -> bool:
    return any(fp.old_path and fp.new_path and fp.old_path != fp.new_path for fp in files)


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

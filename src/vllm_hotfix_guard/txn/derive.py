"""A target's recorded series turned back into bytes: every state of each file's chain, each one checked.

Each file a hotfix touches records the sha256 it had just before and just after it, so the records of
one file chain from its pristine bytes to what it must hold now. ``Derivation.states(path)`` finds the
bottom of the chain -- the first hotfix's kept original (``backups/<id>/``, checked against its
before-hash), else each step's recorded patch reversed from the file as it is -- and then applies every
recorded patch upward from there, the top one included, each result checked against the recorded
sha256. A record whose hashes do not follow from its patches is InvalidInput and steers nothing.

The verdict (txn/judgement.py) derives every chain this way; the writers (flow/series.Series: rollback,
overlaps, the pristine bytes apply proves) read the states from here. Stdlib only; the patch engine
(core/hunk_apply, core/diff) is imported when a chain is derived, never by a guard whose records are sealed.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from vllm_hotfix_guard.errors import DoesNotApply, InvalidInput, Refused
from vllm_hotfix_guard.txn.fsops import sha256_hex as sha256
from vllm_hotfix_guard.txn.state import RecordedFile, RecordedHotfix, TargetState

Step = tuple  # (hotfix id, sha256 before, sha256 after)


def steps_by_path(state: TargetState) -> dict[str, list[Step]]:
    """path -> the steps of every recorded hotfix that touches it, in series order."""
    chains: dict[str, list[Step]] = {}
    for hotfix_id, steps in state.series():
        for path, before, after in steps:
            chains.setdefault(path, []).append((hotfix_id, before, after))
    return chains


def level(chain: list[Step], current: Optional[str]) -> Optional[int]:
    """Which state of the chain a file holds: 0 = before the first step, len(chain) = after the last."""
    states = [chain[0][1]] + [after for _, _, after in chain]
    return next((j for j in range(len(states) - 1, -1, -1) if states[j] == current), None)


def recorded_patch(state: TargetState, recorded: RecordedHotfix):
    """The exact patches a record says were applied (core.diff.Patch), parsed as they were then."""
    from vllm_hotfix_guard.core.diff import Patch, exclude_paths, parse_patch

    files = []
    for index, rel in enumerate(recorded.patches):
        data = state.read_patch(rel)
        if data is None:
            raise Refused(f"{state.directory / rel}: the recorded patch of {recorded.id} is gone",
                          hint="restore the state directory from a backup or reinstall the package")
        strip = recorded.strip[index] if index < len(recorded.strip) else 1
        exclude = recorded.exclude[index] if index < len(recorded.exclude) else ()
        patch = parse_patch(data, strip=strip, source=str(state.directory / rel))
        files.extend((exclude_paths(patch, exclude) if exclude else patch).files)
    return Patch(tuple(files), recorded.id)


def apply_part(part, path: str, data: Optional[bytes], mode: int, *, reverse: bool = False) -> tuple[Optional[bytes], list]:
    """``data`` of ``path`` with one hotfix's file patches for it applied (or reversed), and the
    placements of each file patch (in order); DoesNotApply when a hunk does not fit."""
    from vllm_hotfix_guard.core.hunk_apply import FileState, plan_patch
    from vllm_hotfix_guard.core.diff import Patch

    placements = []
    files = part.files[::-1] if reverse else part.files
    for fp in files:
        state = None if data is None else FileState(data, mode)
        plan = plan_patch(Patch((fp,), part.source), lambda p, s=state: s if p == path else None, reverse=reverse)
        edit = next((e for e in plan.edits if e.path == path), None)
        if edit is not None:
            data = edit.after
            placements.append((fp, edit.placements))
    return data, placements


def moves(files) -> bool:
    """Whether any of these file patches renames or copies a file (it reads another path)."""
    return any(fp.old_path and fp.new_path and fp.old_path != fp.new_path for fp in files)


class Derivation:
    """The recorded series of one target as bytes, on demand (each result checked against the record).
    ``read(path)`` gives the file as it is (``.data``, ``.mode``) or None: install/tree.Tree.read for the
    commands, the guard's bounded reader for the guard."""

    def __init__(self, state: TargetState, read: Callable, root=None):
        self.state, self.read, self.root = state, read, root  # root: for messages
        self.chains = steps_by_path(state)
        self._patches: dict = {}
        self.reversed_any = False  # some state below a file came from reversing a patch (no kept original)

    def part(self, hotfix_id: str, path: str):
        """The file patches of ``hotfix_id``'s recorded patches that touch ``path`` (modify, create, delete;
        a rename or copy only where no other hotfix touches the path: it is planned on the whole tree)."""
        from vllm_hotfix_guard.core.diff import Patch

        if hotfix_id not in self._patches:
            self._patches[hotfix_id] = recorded_patch(self.state, self.state.hotfixes[hotfix_id])
        files = tuple(fp for fp in self._patches[hotfix_id].files if path in (fp.old_path, fp.new_path))
        if moves(files) and len(self.chains.get(path, ())) > 1:
            raise Refused(f"{path}: {hotfix_id} renames or copies it, and another hotfix of the series touches it too",
                          hint="a series supports renamed files only when no other hotfix touches them")
        return Patch(files, hotfix_id)

    def states(self, path: str) -> tuple[list[Optional[bytes]], int, object]:
        """(bytes of every state of ``path``'s chain, the state the file holds now, the file as read):
        what a write needs; Refused when the file holds none of them (changed by hand)."""
        found = self.read(path)
        at = level(self.chains[path], sha256(found.data if found else None))
        if at is None:
            chain = self.chains[path]
            where = f"{self.root}/{path}" if self.root is not None else path
            raise Refused(f"{where}: neither what {', '.join(s[0] for s in chain)} wrote "
                          f"nor the baseline (changed by hand?)",
                          hint="restore it (reinstall the package / git checkout), then retry; nothing was changed")
        return self.derive(path, found, at), at, found

    def derive(self, path: str, found=None, at: Optional[int] = None) -> list[Optional[bytes]]:
        """Every state of ``path``'s chain, from the bottom up: the bottom from the first hotfix's kept
        original, else (the file at state ``at``) by reversing each step down from it; then each recorded
        patch applied to the state below it, the top one included. Every state has the recorded sha256."""
        chain = self.chains[path]
        wanted = [chain[0][1]] + [after for _, _, after in chain]
        mode = found.mode if found else 0o100644
        states: list[Optional[bytes]] = [self._bottom(path, found, at)]
        for i, (hotfix_id, _, _) in enumerate(chain):  # up: each recorded patch applied to the state below it
            states.append(self._derive(hotfix_id, path, states[i], mode, False, wanted[i + 1]))
        return states

    def _bottom(self, path: str, found, at: Optional[int]) -> Optional[bytes]:
        chain = self.chains[path]
        wanted = [chain[0][1]] + [after for _, _, after in chain]
        bottom = self._kept(chain[0][0], path, wanted[0])
        if bottom is not None or wanted[0] is None:
            return bottom
        if at is None:
            raise Refused(f"{path}: no kept original of {chain[0][0]} and the file holds none of its recorded states",
                          hint="restore it (reinstall the package / git checkout), then retry")
        bottom = found.data if found else None
        mode = found.mode if found else 0o100644
        for i in range(at - 1, -1, -1):  # down: each step's kept original, else its patch reversed
            kept = self._kept(chain[i][0], path, wanted[i])
            if kept is None:
                self.reversed_any = True
            bottom = kept if kept is not None else self._derive(chain[i][0], path, bottom, mode, True, wanted[i])
        return bottom

    def _before(self, path: str):
        """A path's bytes before the series (``_bottom``), as a reader gives them: what a rename or copy
        reads from its other path when its step is derived upward (no other hotfix touches such a path)."""
        from vllm_hotfix_guard.core.hunk_apply import FileState

        if path not in self.chains:
            return self.read(path)
        found = self.read(path)
        data = self._bottom(path, found, level(self.chains[path], sha256(found.data if found else None)))
        return None if data is None else FileState(data, found.mode if found else 0o100644)

    def _kept(self, hotfix_id: str, path: str, expected: Optional[str]) -> Optional[bytes]:
        if expected is None:
            return None
        recorded = self.state.hotfixes[hotfix_id]
        return self.state.read_backup(recorded, RecordedFile(path, expected, None))

    def _derive(self, hotfix_id: str, path: str, data: Optional[bytes], mode: int, reverse: bool,
                expected: Optional[str]) -> Optional[bytes]:
        part = self.part(hotfix_id, path)
        try:
            if moves(part.files):  # a rename / copy reads its other path: down, from the tree as it is; up,
                from vllm_hotfix_guard.core.hunk_apply import plan_patch  # from the bytes before the series

                plan = plan_patch(part, self.read if reverse else self._before, reverse=reverse)
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

    def pristine(self, paths: Iterable[str]) -> dict[str, Optional[bytes]]:
        """The bytes each path had before the series (derived and checked as in ``states``)."""
        return {path: self.states(path)[0][0] for path in paths}

    def problem(self, paths: Iterable[str]) -> Optional[str]:
        """Why the record of these paths does not follow from its kept originals and patches, or None:
        each chain derived from the bottom up (``derive``), wherever the file is now. A chain with no
        kept original whose file holds none of its states cannot be derived here: its files' verdict
        (drifted) says what is wrong."""
        for path in paths:
            found = self.read(path)
            at = level(self.chains[path], sha256(found.data if found else None))
            chain = self.chains[path]
            if at is None and chain[0][1] is not None and self._kept(chain[0][0], path, chain[0][1]) is None:
                continue
            try:
                self.derive(path, found, at)
            except (InvalidInput, Refused) as exc:
                return exc.message
        return None
